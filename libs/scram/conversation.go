package scram

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"strings"

	xscram "github.com/xdg-go/scram"
)

// Conversation is the server side of one SCRAM conversation: xdg-go/scram's,
// with one allowance Kafka brokers make. Kafka accepts a client-final
// nonce that ends with the nonce the server sent (its ScramSaslServer
// checks endsWith); librdkafka 2.0 sends the client's part of the nonce
// twice there, so a strict check refuses every librdkafka 2.0 client.
// Such a final message is verified here, by RFC 5802's rules, over the
// message exactly as the client sent it.
type Conversation struct {
	xs    *xscram.ServerConversation
	store *Store
	mech  Mechanism
	step  int
	// c1bare and s1 are the client-first-message-bare and the
	// server-first-message, for the AuthMessage.
	c1bare, s1 string
	done       bool
	valid      bool
}

// Step answers one client message.
func (c *Conversation) Step(msg string) (string, error) {
	c.step++
	if c.step == 1 {
		out, err := c.xs.Step(msg)
		if err == nil {
			// gs2-header is "flag,[a=authzid]," : the bare message
			// follows its second comma.
			if i := strings.Index(msg, ","); i >= 0 {
				if j := strings.Index(msg[i+1:], ","); j >= 0 {
					c.c1bare = msg[i+1+j+1:]
				}
			}
			c.s1 = out
		}
		c.done = err != nil
		return out, err
	}
	sent := attr(c.s1, "r")
	got := attr(msg, "r")
	if got == sent || sent == "" || !strings.HasSuffix(got, sent) {
		out, err := c.xs.Step(msg)
		c.done, c.valid = c.xs.Done(), c.xs.Valid()
		return out, err
	}
	c.done = true
	out, err := c.lenientFinal(msg)
	c.valid = err == nil
	return out, err
}

// lenientFinal verifies a client-final-message whose nonce ends with the
// server's.
func (c *Conversation) lenientFinal(msg string) (string, error) {
	i := strings.LastIndex(msg, ",p=")
	if i < 0 {
		return "e=invalid-encoding", errors.New("client final message has no proof")
	}
	withoutProof := msg[:i]
	proof, err := base64.StdEncoding.DecodeString(msg[i+3:])
	if err != nil {
		return "e=invalid-encoding", errors.New("client proof is not base64")
	}
	if cb := attr(msg, "c"); cb != "biws" && cb != "eSws" {
		return "e=channel-bindings-dont-match", errors.New("channel binding is not supported")
	}
	cred, ok := c.store.Lookup(c.xs.Username(), c.mech)
	if !ok {
		// The same check against the stand-in credential, so an unknown
		// user takes as long to refuse as a wrong password.
		cred = c.store.fakeCredential(c.xs.Username(), c.mech)
	}
	h := sha256.New
	if c.mech == SHA512 {
		h = sha512.New
	}
	authMsg := []byte(c.c1bare + "," + c.s1 + "," + withoutProof)
	sig := hmac.New(h, cred.GetStoredKey())
	sig.Write(authMsg)
	clientSig := sig.Sum(nil)
	if len(proof) != len(clientSig) {
		return "e=invalid-proof", errors.New("challenge proof invalid")
	}
	clientKey := make([]byte, len(proof))
	for k := range proof {
		clientKey[k] = proof[k] ^ clientSig[k]
	}
	sum := h()
	sum.Write(clientKey)
	if !hmac.Equal(sum.Sum(nil), cred.GetStoredKey()) || !ok {
		return "e=invalid-proof", errors.New("challenge proof invalid")
	}
	ss := hmac.New(h, cred.GetServerKey())
	ss.Write(authMsg)
	return "v=" + base64.StdEncoding.EncodeToString(ss.Sum(nil)), nil
}

// attr returns the value of attribute k in a SCRAM message.
func attr(msg, k string) string {
	for _, f := range strings.Split(msg, ",") {
		if v, ok := strings.CutPrefix(f, k+"="); ok {
			return v
		}
	}
	return ""
}

// Done reports whether the conversation ended.
func (c *Conversation) Done() bool { return c.done }

// Valid reports whether the client proved its password.
func (c *Conversation) Valid() bool { return c.valid }

// Username is the user the client named.
func (c *Conversation) Username() string { return c.xs.Username() }

// AuthzID is the authorization id the client named, if any.
func (c *Conversation) AuthzID() string { return c.xs.AuthzID() }

// Started reports whether the conversation has seen the client's first
// message (after which Username is known).
func (c *Conversation) Started() bool { return c.step > 0 }
