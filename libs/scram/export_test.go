package scram

// CountDerivations makes v count the salted passwords it derives in *n.
func CountDerivations(v *Verifier, n *int) {
	v.derive = func(m Mechanism, password string, salt []byte, iterations int) ([]byte, error) {
		*n++
		return SaltedPassword(m, password, salt, iterations)
	}
}

// FakeCredential exposes the stand-in credential of an unknown user.
var FakeCredential = (*Store).fakeCredential
