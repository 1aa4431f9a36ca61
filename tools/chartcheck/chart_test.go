package chartcheck

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-io/sluice/libs/tlsx"
)

const (
	chartDir  = "../../deploy/k8s/sluice"
	release   = "rel"
	namespace = "streams"
	// Kubernetes version the chart is rendered for: its lowest supported one
	// (the pod-index label).
	kubeVersion = "1.28.0"
	// sluiced bounds a SIGTERM stop at 30 s (libs/service Manager.StopTimeout);
	// a grace period shorter than that cuts a controlled shutdown short.
	minGraceSeconds = 30
	// --node-id=auto ids start here (libs/config.AutoIDBase).
	autoIDBase = 1 << 29
)

// tool finds a binary: $env, else bin/<name> of the repository. Without it
// the test skips: make helm-check (part of make test) sets both variables, so
// there it always runs; under make unit, which runs before helm is built, it
// is a second run only where a helm is already there.
func tool(t *testing.T, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	p, err := filepath.Abs(filepath.Join("../../bin", name))
	require.NoError(t, err)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	t.Skipf("%s not found: set %s or run make helm-check", p, env)
	return ""
}

func render(t *testing.T, helm string, args ...string) []obj {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, append([]string{"template", release, chartDir,
		"--namespace", namespace, "--kube-version", kubeVersion}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "helm template: %s", stderr.String())
	objs, err := parse(out)
	require.NoError(t, err)
	return objs
}

// sluicedFlags lists the flags `sluiced --help` prints.
func sluicedFlags(t *testing.T, sluiced string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// --help exits 0 or 2 depending on the flag package; the text is what counts.
	out, _ := exec.CommandContext(ctx, sluiced, "--help").CombinedOutput()
	flags := map[string]bool{}
	re := regexp.MustCompile(`^\s+-([a-z0-9][a-z0-9.-]*)`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			flags[m[1]] = true
		}
	}
	require.Contains(t, flags, "controller.etcd.initial-cluster", "sluiced --help: %s", out)
	return flags
}

func TestChart(t *testing.T) {
	helm := tool(t, "SLUICE_HELM", "helm")
	flags := sluicedFlags(t, tool(t, "SLUICED", "sluiced"))

	t.Run("default values", func(t *testing.T) {
		objs := render(t, helm)
		require.NoError(t, check(objs, want{controllers: 3, storage: 3, replication: 2, flags: flags}))
	})
	t.Run("tls values", func(t *testing.T) {
		objs := render(t, helm, "-f", filepath.Join(chartDir, "ci/tls-values.yaml"))
		require.NoError(t, check(objs, want{controllers: 3, storage: 3, replication: 2, flags: flags,
			tlsSecret: map[string]string{"storage": "sluice-storage-tls", "": "sluice-tls"}}))
	})
	t.Run("cert-manager refuses a secret shared by two roles", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, helm, "template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion,
			"-f", filepath.Join(chartDir, "ci/cert-manager-values.yaml"), "--set", "groupCoordinator.tls.secretName=sluice-storage-tls").CombinedOutput()
		require.Error(t, err, "rendered two Certificates writing one secret")
		require.Contains(t, string(out), `the storage and group-coordinator roles both use the secret "sluice-storage-tls"`)
	})
	t.Run("cert-manager values", func(t *testing.T) {
		objs := render(t, helm, "-f", filepath.Join(chartDir, "ci/cert-manager-values.yaml"))
		require.NoError(t, check(objs, want{controllers: 3, storage: 3, replication: 2, flags: flags,
			tlsSecret: certManagerSecrets, issuer: "ClusterIssuer/sluice-ca"}))
	})
	t.Run("scaled", func(t *testing.T) {
		objs := render(t, helm, "--set", "controller.replicas=5,storage.replicas=6,replication.replicas=3")
		require.NoError(t, check(objs, want{controllers: 5, storage: 6, replication: 3, flags: flags}))
	})
	t.Run("even controller count refused", func(t *testing.T) {
		cmd := exec.Command(helm, "template", release, chartDir, "--kube-version", kubeVersion, "--set", "controller.replicas=2")
		out, err := cmd.CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "controller.replicas must be odd")
	})

	// The certificate checks catch what they are for, on the cert-manager
	// rendering.
	for _, tc := range []struct {
		name, wantErr string
		breakIt       func(objs []obj)
	}{
		{"storage certificate without the pods' DNS names", `rel-sluice-storage-0.rel-sluice-storage.streams.svc.cluster.local`, func(objs []obj) {
			spec := find(objs, "Certificate", "rel-sluice-storage").m("spec")
			spec["dnsNames"] = slices.DeleteFunc(spec["dnsNames"].([]any), func(v any) bool { return strings.HasPrefix(fmt.Sprint(v), "*.") })
		}},
		{"controller certificate without its etcd name", "controller.role.sluice.invalid", func(objs []obj) {
			spec := find(objs, "Certificate", "rel-sluice-controller").m("spec")
			spec["dnsNames"] = slices.DeleteFunc(spec["dnsNames"].([]any), func(v any) bool { return fmt.Sprint(v) == "controller.role.sluice.invalid" })
		}},
		{"certificate naming two roles", "names roles [group-coordinator controller]", func(objs []obj) {
			spec := find(objs, "Certificate", "rel-sluice-group-coordinator").m("spec")
			spec["uris"] = append(spec["uris"].([]any), "sluice://role/controller")
		}},
		{"certificate writing a secret no pod mounts", "secret rel-sluice-replication-tls mounted by rel-sluice-replication", func(objs []obj) {
			find(objs, "Certificate", "rel-sluice-replication").m("spec")["secretName"] = "other"
		}},
		{"certificate without the client Service's name", "rel-sluice.streams.svc", func(objs []obj) {
			spec := find(objs, "Certificate", "rel-sluice-transaction-coordinator").m("spec")
			spec["dnsNames"] = slices.DeleteFunc(spec["dnsNames"].([]any), func(v any) bool { return strings.HasPrefix(fmt.Sprint(v), "rel-sluice.streams.svc") })
		}},
		{"certificate without the probes' address", "127.0.0.1", func(objs []obj) {
			delete(find(objs, "Certificate", "rel-sluice-controller").m("spec"), "ipAddresses")
		}},
		{"certificate only for servers", "client auth", func(objs []obj) {
			find(objs, "Certificate", "rel-sluice-storage").m("spec")["usages"] = []any{"digital signature", "server auth"}
		}},
	} {
		t.Run("broken: "+tc.name, func(t *testing.T) {
			objs := render(t, helm, "-f", filepath.Join(chartDir, "ci/cert-manager-values.yaml"))
			tc.breakIt(objs)
			err := check(objs, want{controllers: 3, storage: 3, replication: 2, flags: flags,
				tlsSecret: certManagerSecrets, issuer: "ClusterIssuer/sluice-ca"})
			require.ErrorContains(t, err, tc.wantErr)
		})
	}

	// The checks catch what they are for: each broken rendering fails.
	for _, tc := range []struct {
		name, wantErr string
		breakIt       func(objs []obj)
	}{
		{"storage without volume claims", "volumeClaimTemplates", func(objs []obj) {
			delete(find(objs, "StatefulSet", "rel-sluice-storage").m("spec"), "volumeClaimTemplates")
		}},
		{"coordinator without readiness probe", "readinessProbe", func(objs []obj) {
			delete(container(find(objs, "Deployment", "rel-sluice-group-coordinator")), "readinessProbe")
		}},
		{"etcd initial cluster short of a member", "initial cluster", func(objs []obj) {
			editArg(container(find(objs, "StatefulSet", "rel-sluice-controller")), "controller.etcd.initial-cluster",
				func(v string) string { return v[:strings.LastIndex(v, ",")] })
		}},
		{"no controller disruption budget", "PodDisruptionBudget rel-sluice-controller", func(objs []obj) {
			find(objs, "PodDisruptionBudget", "rel-sluice-controller")["kind"] = "Gone"
		}},
		{"overlapping node ids", "overlap", func(objs []obj) {
			editArg(container(find(objs, "StatefulSet", "rel-sluice-storage")), "node-id",
				func(string) string { return "ordinal+2" })
		}},
		{"misspelt flag", "not a sluiced flag", func(objs []obj) {
			c := container(find(objs, "Deployment", "rel-sluice-transaction-coordinator"))
			c["args"] = append(c["args"].([]any), "--kafka-listn=0.0.0.0:9092")
		}},
		{"writable root file system", "readOnlyRootFilesystem", func(objs []obj) {
			container(find(objs, "StatefulSet", "rel-sluice-replication")).m("securityContext")["readOnlyRootFilesystem"] = false
		}},
		{"headless service hiding unready pods", "publishNotReadyAddresses", func(objs []obj) {
			find(objs, "Service", "rel-sluice-controller").m("spec")["publishNotReadyAddresses"] = false
		}},
	} {
		t.Run("broken: "+tc.name, func(t *testing.T) {
			objs := render(t, helm)
			tc.breakIt(objs)
			err := check(objs, want{controllers: 3, storage: 3, replication: 2, flags: flags})
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// obj is one parsed manifest (or a part of one).
type obj map[string]any

func (o obj) m(key string) obj {
	v, _ := o[key].(map[string]any)
	return v
}

func (o obj) list(key string) []obj {
	var out []obj
	l, _ := o[key].([]any)
	for _, v := range l {
		if m, ok := v.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func (o obj) str(key string) string {
	switch v := o[key].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

func parse(out []byte) ([]obj, error) {
	var objs []obj
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parsing the rendered manifests: %w", err)
		}
		if o == nil {
			continue // an empty document between two ---
		}
		if obj(o).str("apiVersion") == "" || obj(o).str("kind") == "" || obj(o).m("metadata").str("name") == "" {
			return nil, fmt.Errorf("a manifest without apiVersion, kind or name: %v", o)
		}
		objs = append(objs, o)
	}
}

func find(objs []obj, kind, name string) obj {
	for _, o := range objs {
		if o.str("kind") == kind && o.m("metadata").str("name") == name {
			return o
		}
	}
	return nil
}

func container(workload obj) obj {
	for _, c := range workload.m("spec").m("template").m("spec").list("containers") {
		if c.str("name") == "sluiced" {
			return c
		}
	}
	return nil
}

// args maps each --flag=value of a container to its value.
func args(c obj) map[string]string {
	out := map[string]string{}
	for _, a := range c["args"].([]any) {
		name, value, _ := strings.Cut(strings.TrimPrefix(fmt.Sprint(a), "--"), "=")
		out[name] = value
	}
	return out
}

func editArg(c obj, name string, edit func(string) string) {
	l := c["args"].([]any)
	for i, a := range l {
		if v, ok := strings.CutPrefix(fmt.Sprint(a), "--"+name+"="); ok {
			l[i] = "--" + name + "=" + edit(v)
		}
	}
}

type want struct {
	controllers, storage, replication int
	// flags sluiced knows.
	flags map[string]bool
	// tlsSecret, when set, is the secret each role's pods mount ("" for
	// roles not named); nil means TLS off.
	tlsSecret map[string]string
	// issuer, when set, is the cert-manager issuer (Kind/name) of a
	// Certificate per role; empty means no Certificate at all.
	issuer string
}

// certManagerSecrets are the secrets of ci/cert-manager-values.yaml: each
// role's Certificate writes its own, the storage nodes' under the name the
// values give it.
var certManagerSecrets = map[string]string{
	"controller":              "rel-sluice-controller-tls",
	"storage":                 "sluice-storage-tls",
	"replication":             "rel-sluice-replication-tls",
	"group-coordinator":       "rel-sluice-group-coordinator-tls",
	"transaction-coordinator": "rel-sluice-transaction-coordinator-tls",
}

// The roles: their component name (the suffix of every object's name),
// workload kind and role name (libs/role, the URI SAN sluice://role/<role>).
var roles = []struct{ component, kind, role string }{
	{"controller", "StatefulSet", "controller"},
	{"storage", "StatefulSet", "storage-node"},
	{"replication", "StatefulSet", "replication"},
	{"group-coordinator", "Deployment", "group-coordinator"},
	{"transaction-coordinator", "Deployment", "transaction-coordinator"},
}

func check(objs []obj, w want) error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	fullname := release + "-sluice"
	var controllersFlag string
	replicas := map[string]int{"controller": w.controllers, "storage": w.storage, "replication": w.replication}
	for _, r := range roles {
		name := fullname + "-" + r.component
		wl := find(objs, r.kind, name)
		if wl == nil {
			fail("%s %s: missing", r.kind, name)
			continue
		}
		spec := wl.m("spec")
		if n, ok := replicas[r.component]; ok && spec.str("replicas") != strconv.Itoa(n) {
			fail("%s: replicas %s, want %d", name, spec.str("replicas"), n)
		}
		pod := spec.m("template").m("spec")
		podLabels := spec.m("template").m("metadata").m("labels")
		if !matches(spec.m("selector").m("matchLabels"), podLabels) {
			fail("%s: its selector does not match its pod labels", name)
		}
		if sc := pod.m("securityContext"); sc.str("runAsNonRoot") != "true" || sc.str("runAsUser") != "65532" {
			fail("%s: pod securityContext %v, want runAsNonRoot and runAsUser 65532 (the image's user)", name, sc)
		}
		if g, _ := strconv.Atoi(pod.str("terminationGracePeriodSeconds")); g <= minGraceSeconds {
			fail("%s: terminationGracePeriodSeconds %d, want more than sluiced's %d s stop bound", name, g, minGraceSeconds)
		}
		c := container(wl)
		if c == nil {
			fail("%s: no container sluiced", name)
			continue
		}
		if c.m("securityContext").str("readOnlyRootFilesystem") != "true" {
			fail("%s: readOnlyRootFilesystem is not true", name)
		}
		if len(c.m("resources").m("requests")) == 0 {
			fail("%s: no resource requests", name)
		}
		for _, p := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
			if err := checkProbe(c.m(p), w.tlsSecret != nil); err != nil {
				fail("%s: %s: %v", name, p, err)
			}
		}
		a := args(c)
		for flag := range a {
			if w.flags != nil && !w.flags[flag] {
				fail("%s: --%s is not a sluiced flag", name, flag)
			}
		}
		env := map[string]obj{}
		for _, e := range c.list("env") {
			env[e.str("name")] = e
		}
		for _, v := range []string{"POD_NAME", "POD_INDEX"} {
			if strings.Contains(fmt.Sprint(c["args"]), "$("+v+")") && env[v] == nil {
				fail("%s: args use $(%s), which env does not set", name, v)
			}
		}
		if env["POD_NAME"].m("valueFrom").m("fieldRef").str("fieldPath") != "metadata.name" {
			fail("%s: POD_NAME does not come from metadata.name", name)
		}
		if controllersFlag == "" {
			controllersFlag = a["controllers"]
		} else if a["controllers"] != controllersFlag {
			fail("%s: --controllers=%s, other roles have %s", name, a["controllers"], controllersFlag)
		}
		checkVolumes(name, r.kind, wl, c, w, r.component, fail)
		checkPDB(objs, fullname+"-"+r.component, podLabels, fail)
		if r.kind == "StatefulSet" {
			svc := find(objs, "Service", spec.str("serviceName"))
			switch {
			case svc == nil:
				fail("%s: serviceName %q is no Service of the chart", name, spec.str("serviceName"))
			case svc.m("spec").str("clusterIP") != "None":
				fail("Service %s: not headless", spec.str("serviceName"))
			case svc.m("spec").str("publishNotReadyAddresses") != "true":
				fail("Service %s: publishNotReadyAddresses is not true: pods could not find each other before they are ready", spec.str("serviceName"))
			case !matches(svc.m("spec").m("selector"), podLabels):
				fail("Service %s: its selector does not match %s's pods", spec.str("serviceName"), name)
			}
		}
		if client := find(objs, "Service", fullname); client == nil || !matches(client.m("spec").m("selector"), podLabels) {
			fail("the client Service %s does not select %s's pods", fullname, name)
		}
	}
	errs = append(errs, checkFlags(objs, w)...)
	errs = append(errs, checkCertificates(objs, w)...)
	return errors.Join(errs...)
}

// matches says whether every label of sel is in labels.
func matches(sel, labels obj) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels.str(k) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

func checkProbe(p obj, tls bool) error {
	if p == nil {
		return errors.New("missing")
	}
	if !tls {
		if p.m("grpc").str("port") != "9090" {
			return fmt.Errorf("%v: want Kubernetes' gRPC probe on port 9090", p)
		}
		return nil
	}
	cmd := fmt.Sprint(p.m("exec")["command"])
	if !strings.HasPrefix(cmd, "[/sluice health") || !strings.Contains(cmd, "--tls-ca=") || !strings.Contains(cmd, "--tls-cert=") {
		return fmt.Errorf("%s: want /sluice health with the TLS files (the gRPC probe cannot speak TLS)", cmd)
	}
	return nil
}

// checkVolumes: /data is a claim of its own on controllers and storage
// nodes, an emptyDir elsewhere; with TLS, the secret is mounted and passed.
func checkVolumes(name, kind string, wl, c obj, w want, component string, fail func(string, ...any)) {
	mounts := map[string]string{}
	for _, m := range c.list("volumeMounts") {
		mounts[m.str("mountPath")] = m.str("name")
	}
	if mounts["/data"] != "data" {
		fail("%s: /data is not mounted from volume data", name)
	}
	volumes := map[string]obj{}
	for _, v := range wl.m("spec").m("template").m("spec").list("volumes") {
		volumes[v.str("name")] = v
	}
	stateful := component == "controller" || component == "storage"
	claims := wl.m("spec").list("volumeClaimTemplates")
	switch {
	case stateful && (len(claims) != 1 || claims[0].m("metadata").str("name") != "data" ||
		claims[0].m("spec").m("resources").m("requests").str("storage") == ""):
		fail("%s: want one volumeClaimTemplates entry named data with a size, have %v", name, claims)
	case !stateful && volumes["data"].m("emptyDir") == nil:
		fail("%s: /data is not an emptyDir", name)
	}
	a := args(c)
	if w.tlsSecret == nil {
		if _, ok := a["tls.cert"]; ok || volumes["tls"] != nil {
			fail("%s: TLS flags or volume with TLS off", name)
		}
		return
	}
	secret := w.tlsSecret[component]
	if secret == "" {
		secret = w.tlsSecret[""]
	}
	if got := volumes["tls"].m("secret").str("secretName"); got != secret {
		fail("%s: TLS secret %q, want %q", name, got, secret)
	}
	if mounts["/etc/sluice/tls"] != "tls" {
		fail("%s: the TLS secret is not mounted at /etc/sluice/tls", name)
	}
	for flag, file := range map[string]string{"tls.cert": "tls.crt", "tls.key": "tls.key", "tls.ca": "ca.crt"} {
		if a[flag] != "/etc/sluice/tls/"+file {
			fail("%s: --%s=%q, want /etc/sluice/tls/%s", name, flag, a[flag], file)
		}
	}
}

func checkPDB(objs []obj, name string, podLabels obj, fail func(string, ...any)) {
	pdb := find(objs, "PodDisruptionBudget", name)
	if pdb == nil {
		fail("PodDisruptionBudget %s: missing", name)
		return
	}
	if pdb.m("spec").str("maxUnavailable") != "1" {
		fail("PodDisruptionBudget %s: maxUnavailable %s, want 1", name, pdb.m("spec").str("maxUnavailable"))
	}
	if !matches(pdb.m("spec").m("selector").m("matchLabels"), podLabels) {
		fail("PodDisruptionBudget %s: its selector does not match the pods", name)
	}
}

// checkFlags checks that the flags of the roles agree: the etcd initial
// cluster, --controllers, node ids and replication shards.
func checkFlags(objs []obj, w want) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	fullname := release + "-sluice"
	ctl := find(objs, "StatefulSet", fullname+"-controller")
	sto := find(objs, "StatefulSet", fullname+"-storage")
	rep := find(objs, "StatefulSet", fullname+"-replication")
	if ctl == nil || sto == nil || rep == nil {
		return nil // reported already
	}
	scheme := "http"
	if w.tlsSecret != nil {
		scheme = "https"
	}
	podDNS := func(set obj, i int) string {
		name := set.m("metadata").str("name")
		return fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local", name, i, set.m("spec").str("serviceName"), namespace)
	}
	// A pod's view of its args, $(POD_NAME) expanded as the kubelet does.
	podArgs := func(set obj, i int) map[string]string {
		a := args(container(set))
		for k, v := range a {
			a[k] = strings.ReplaceAll(v, "$(POD_NAME)", fmt.Sprintf("%s-%d", set.m("metadata").str("name"), i))
		}
		return a
	}

	var members, controllers []string
	for i := range w.controllers {
		members = append(members, fmt.Sprintf("%s-controller-%d=%s://%s:9094", fullname, i, scheme, podDNS(ctl, i)))
		controllers = append(controllers, podDNS(ctl, i)+":9090")
	}
	for i := range w.controllers {
		a := podArgs(ctl, i)
		if got := strings.Split(a["controller.etcd.initial-cluster"], ","); !slices.Equal(got, members) {
			fail("controller %d: etcd initial cluster %v, want %v", i, got, members)
		}
		self := members[i]
		if a["controller.etcd.name"]+"="+scheme+"://"+a["controller.etcd.peer-advertise"] != self {
			fail("controller %d: etcd name %q and peer address %q are not its initial cluster entry %q",
				i, a["controller.etcd.name"], a["controller.etcd.peer-advertise"], self)
		}
		if a["advertise"] != podDNS(ctl, i)+":9090" || a["controller.etcd.client-advertise"] != podDNS(ctl, i)+":9093" {
			fail("controller %d: advertised %q / etcd client %q, want its DNS name", i, a["advertise"], a["controller.etcd.client-advertise"])
		}
	}
	if got := args(container(ctl))["controllers"]; got != strings.Join(controllers, ",") {
		fail("--controllers=%s, want %s", got, strings.Join(controllers, ","))
	}
	for i := range w.storage {
		a := podArgs(sto, i)
		if a["advertise"] != podDNS(sto, i)+":9090" || a["kafka-advertise"] != podDNS(sto, i)+":9092" {
			fail("storage %d: advertised %q and %q, want its DNS name", i, a["advertise"], a["kafka-advertise"])
		}
	}

	// Node ids: ordinal-derived ranges that overlap neither each other nor
	// the automatic ids of the stateless roles.
	base := func(set obj) int {
		v, ok := strings.CutPrefix(args(container(set))["node-id"], "ordinal+")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			fail("%s: --node-id=%s, want ordinal+N", set.m("metadata").str("name"), args(container(set))["node-id"])
			return -1
		}
		return n
	}
	cb, sb := base(ctl), base(sto)
	if cb >= 0 && sb >= 0 && (cb < sb+w.storage && sb < cb+w.controllers) {
		fail("node ids overlap: controllers %d..%d, storage nodes %d..%d", cb, cb+w.controllers-1, sb, sb+w.storage-1)
	}
	if cb+w.controllers > autoIDBase || sb+w.storage > autoIDBase {
		fail("node ids reach into the automatic range (from %d)", autoIDBase)
	}
	for _, set := range []obj{rep, find(objs, "Deployment", fullname+"-group-coordinator"), find(objs, "Deployment", fullname+"-transaction-coordinator")} {
		if set != nil && args(container(set))["node-id"] != "auto" {
			fail("%s: --node-id=%s, want auto", set.m("metadata").str("name"), args(container(set))["node-id"])
		}
	}

	ra := args(container(rep))
	if ra["replication.shards"] != strconv.Itoa(w.replication) || ra["replication.shard"] != "$(POD_INDEX)" {
		fail("replication: --replication.shard=%s of --replication.shards=%s, want $(POD_INDEX) of %d",
			ra["replication.shard"], ra["replication.shards"], w.replication)
	}
	for _, e := range container(rep).list("env") {
		if e.str("name") == "POD_INDEX" && e.m("valueFrom").m("fieldRef").str("fieldPath") != "metadata.labels['apps.kubernetes.io/pod-index']" {
			fail("replication: POD_INDEX does not come from the pod-index label")
		}
	}
	return errs
}

// checkCertificates: with an issuer, one cert-manager Certificate per role
// that writes the secret the role's pods mount, names that role and no
// other, and carries every name the role's pods are dialed at: each pod's
// advertised hosts (gRPC, Kafka, and the etcd ports of controllers), the
// client Service and 127.0.0.1 (the probes), checked with crypto/x509's own
// host name matching. Coordinators and replication workers advertise their
// pod IPs, which no Certificate can name: they are checked for the client
// Service and the probes only. Without an issuer there is no Certificate.
func checkCertificates(objs []obj, w want) []error {
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	fullname := release + "-sluice"
	if w.issuer == "" {
		for _, o := range objs {
			if o.str("kind") == "Certificate" {
				fail("Certificate %s rendered without tls.certManager.issuer", o.m("metadata").str("name"))
			}
		}
		return errs
	}
	serviceNames := []string{fullname, fullname + "." + namespace, fullname + "." + namespace + ".svc",
		fullname + "." + namespace + ".svc.cluster.local"}
	for _, r := range roles {
		name := fullname + "-" + r.component
		wl := find(objs, r.kind, name)
		crt := find(objs, "Certificate", name)
		if wl == nil {
			continue // reported already
		}
		if crt == nil {
			fail("Certificate %s: missing", name)
			continue
		}
		if crt.str("apiVersion") != "cert-manager.io/v1" {
			fail("Certificate %s: apiVersion %s, want cert-manager.io/v1", name, crt.str("apiVersion"))
		}
		spec := crt.m("spec")
		var mounted string
		for _, v := range wl.m("spec").m("template").m("spec").list("volumes") {
			if v.str("name") == "tls" {
				mounted = v.m("secret").str("secretName")
			}
		}
		if spec.str("secretName") != mounted || mounted != w.tlsSecret[r.component] {
			fail("Certificate %s: writes secret %s, want the secret %s mounted by %s (%s)",
				name, spec.str("secretName"), w.tlsSecret[r.component], name, mounted)
		}
		if ref := spec.m("issuerRef"); ref.str("kind")+"/"+ref.str("name") != w.issuer || ref.str("group") != "cert-manager.io" {
			fail("Certificate %s: issuer %v, want %s of cert-manager.io", name, ref, w.issuer)
		}
		for _, u := range []string{"server auth", "client auth"} {
			if !slices.Contains(spec["usages"].([]any), any(u)) {
				fail("Certificate %s: usages %v lack %s (every process is a server and a client)", name, spec["usages"], u)
			}
		}
		cert, err := certOf(spec)
		if err != nil {
			fail("Certificate %s: %v", name, err)
			continue
		}
		if got := tlsx.RolesOf(cert); !slices.Equal(got, []string{r.role}) {
			fail("Certificate %s: names roles %v, want only [%s]", name, got, r.role)
		}
		if r.role == "controller" && !tlsx.HasRoleDNSName(cert, "controller") {
			fail("Certificate %s: no DNS SAN %s: the embedded etcd refuses the controllers' peers and clients",
				name, tlsx.RoleDNSName("controller"))
		}
		hosts := append([]string{"127.0.0.1"}, serviceNames...)
		if r.kind == "StatefulSet" {
			n, _ := strconv.Atoi(wl.m("spec").str("replicas"))
			for i := range n {
				pod := fmt.Sprintf("%s-%d", name, i)
				for _, flag := range []string{"advertise", "kafka-advertise", "controller.etcd.client-advertise", "controller.etcd.peer-advertise"} {
					v, ok := args(container(wl))[flag]
					if !ok {
						continue
					}
					host, _, err := net.SplitHostPort(strings.ReplaceAll(v, "$(POD_NAME)", pod))
					if err != nil {
						fail("%s: --%s=%s is not host:port", name, flag, v)
						continue
					}
					hosts = append(hosts, host)
				}
			}
		}
		for _, h := range hosts {
			if err := cert.VerifyHostname(h); err != nil {
				fail("Certificate %s: a caller dialing %s would refuse it: %v", name, h, err)
			}
		}
	}
	return errs
}

// certOf is the x509 certificate a Certificate spec asks for, as far as
// names go: enough for VerifyHostname and the role SANs.
func certOf(spec obj) (*x509.Certificate, error) {
	cert := &x509.Certificate{}
	for _, v := range spec["dnsNames"].([]any) {
		cert.DNSNames = append(cert.DNSNames, fmt.Sprint(v))
	}
	ips, _ := spec["ipAddresses"].([]any)
	for _, v := range ips {
		ip := net.ParseIP(fmt.Sprint(v))
		if ip == nil {
			return nil, fmt.Errorf("ipAddresses: %v is not an IP address", v)
		}
		cert.IPAddresses = append(cert.IPAddresses, ip)
	}
	uris, _ := spec["uris"].([]any)
	for _, v := range uris {
		u, err := url.Parse(fmt.Sprint(v))
		if err != nil {
			return nil, fmt.Errorf("uris: %w", err)
		}
		cert.URIs = append(cert.URIs, u)
	}
	return cert, nil
}
