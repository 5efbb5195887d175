package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/leaf-nats/leaf/internal/natsserver"
	"github.com/leaf-nats/leaf/internal/natstest"
	"github.com/leaf-nats/leaf/kv"
	"github.com/leaf-nats/leaf/status"
	"github.com/leaf-nats/leaf/vending"
)

// authVars are the vendor's NATS authentication variables; every case
// clears them all so no setting leaks from one run into the next.
var authVars = []string{
	"LEAF_NATS_CREDS", "LEAF_NATS_NKEY", "LEAF_NATS_USER", "LEAF_NATS_PASSWORD",
	"LEAF_NATS_TOKEN", "LEAF_NATS_TLS_CA", "LEAF_NATS_TLS_CERT", "LEAF_NATS_TLS_KEY",
}

// authMethod is one way of authenticating, against a server demanding it.
type authMethod struct {
	// server makes the embedded server demand the method.
	server func(*server.Options)
	// scheme is the URL scheme the vendor uses (nats or tls).
	scheme string
	// vendor is the environment that gets in; wrong one that must not.
	// In both, "LEAF_NATS_URL" may hold a user:password@ to put in the URL.
	vendor, wrong map[string]string
	// client connects the test's own client.
	client []nats.Option
	// want is in the refusal message; secret must not be.
	want, secret string
}

func TestAuthenticationMethods(t *testing.T) {
	for name, setup := range map[string]func(t *testing.T) authMethod{
		"user and password in the URL": func(t *testing.T) authMethod {
			return authMethod{
				server: func(o *server.Options) { o.Username, o.Password = "leaf", "url-s3cret" },
				vendor: map[string]string{"LEAF_NATS_URL": "leaf:url-s3cret@"},
				wrong:  map[string]string{"LEAF_NATS_URL": "leaf:not-it@"},
				client: []nats.Option{nats.UserInfo("leaf", "url-s3cret")},
				want:   "refused the credentials", secret: "not-it",
			}
		},
		"LEAF_NATS_USER and LEAF_NATS_PASSWORD": func(t *testing.T) authMethod {
			return authMethod{
				server: func(o *server.Options) { o.Username, o.Password = "leaf", "env-s3cret" },
				vendor: map[string]string{"LEAF_NATS_USER": "leaf", "LEAF_NATS_PASSWORD": "env-s3cret"},
				wrong:  map[string]string{"LEAF_NATS_USER": "leaf", "LEAF_NATS_PASSWORD": "not-it"},
				client: []nats.Option{nats.UserInfo("leaf", "env-s3cret")},
				want:   "refused the credentials", secret: "not-it",
			}
		},
		"LEAF_NATS_TOKEN": func(t *testing.T) authMethod {
			return authMethod{
				server: func(o *server.Options) { o.Authorization = "t0ken-s3cret" },
				vendor: map[string]string{"LEAF_NATS_TOKEN": "t0ken-s3cret"},
				wrong:  map[string]string{"LEAF_NATS_TOKEN": "not-it"},
				client: []nats.Option{nats.Token("t0ken-s3cret")},
				want:   "refused the credentials", secret: "not-it",
			}
		},
		"LEAF_NATS_NKEY": func(t *testing.T) authMethod {
			dir := t.TempDir()
			user, seed := newNKey(t, nkeys.CreateUser)
			_, otherSeed := newNKey(t, nkeys.CreateUser)
			seedFile := writeFile(t, dir, "user.nk", seed)
			clientOpt, err := nats.NkeyOptionFromSeed(seedFile)
			if err != nil {
				t.Fatal(err)
			}
			return authMethod{
				server: func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: user}} },
				vendor: map[string]string{"LEAF_NATS_NKEY": seedFile},
				wrong:  map[string]string{"LEAF_NATS_NKEY": writeFile(t, dir, "other.nk", otherSeed)},
				client: []nats.Option{clientOpt},
				want:   "refused the credentials", secret: string(otherSeed),
			}
		},
		"LEAF_NATS_CREDS": func(t *testing.T) authMethod {
			op := newOperator(t)
			dir := t.TempDir()
			creds := writeFile(t, dir, "user.creds", op.userCreds(t, op.account))
			// A user of an account the operator never signed.
			stranger, _ := nkeys.CreateAccount()
			wrong := writeFile(t, dir, "stranger.creds", op.userCreds(t, stranger))
			return authMethod{
				server: op.configure,
				vendor: map[string]string{"LEAF_NATS_CREDS": creds},
				wrong:  map[string]string{"LEAF_NATS_CREDS": wrong},
				client: []nats.Option{nats.UserCredentials(creds)},
				want:   "refused the credentials",
			}
		},
		"LEAF_NATS_TLS_CA, LEAF_NATS_TLS_CERT and LEAF_NATS_TLS_KEY": func(t *testing.T) authMethod {
			dir := t.TempDir()
			ca := newCA(t, "leaf test CA")
			caFile := writeFile(t, dir, "ca.pem", ca.certPEM)
			srvCert, srvKey := ca.issue(t, "nats-server", x509.ExtKeyUsageServerAuth)
			cert, key := ca.issue(t, "leaf-vendor", x509.ExtKeyUsageClientAuth)
			// A client certificate from a CA the server does not trust.
			otherCert, otherKey := newCA(t, "other CA").issue(t, "leaf-vendor", x509.ExtKeyUsageClientAuth)
			certFile, keyFile := writeFile(t, dir, "client.pem", cert), writeFile(t, dir, "client-key.pem", key)
			tlsConf, err := server.GenTLSConfig(&server.TLSConfigOpts{
				CertFile: writeFile(t, dir, "server.pem", srvCert),
				KeyFile:  writeFile(t, dir, "server-key.pem", srvKey),
				CaFile:   caFile,
				Verify:   true,
			})
			if err != nil {
				t.Fatal(err)
			}
			return authMethod{
				server: func(o *server.Options) {
					o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = tlsConf, true, true, 5
				},
				scheme: "tls",
				vendor: map[string]string{"LEAF_NATS_TLS_CA": caFile, "LEAF_NATS_TLS_CERT": certFile, "LEAF_NATS_TLS_KEY": keyFile},
				wrong: map[string]string{
					"LEAF_NATS_TLS_CA":   caFile,
					"LEAF_NATS_TLS_CERT": writeFile(t, dir, "other.pem", otherCert),
					"LEAF_NATS_TLS_KEY":  writeFile(t, dir, "other-key.pem", otherKey),
				},
				client: []nats.Option{nats.RootCAs(caFile), nats.ClientCert(certFile, keyFile)},
				want:   "tls",
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := setup(t)
			s := natstest.ServerWith(t, natsserver.Config{Configure: m.server})
			base := s.ClientURL()
			if _, hostPort, _ := strings.Cut(base, "://"); m.scheme != "" {
				base = m.scheme + "://" + hostPort
			}

			t.Run("vendor serves", func(t *testing.T) {
				stop, logs := startVendor(t, authEnv(base, m.vendor))
				nc, err := nats.Connect(base, m.client...)
				if err != nil {
					t.Fatalf("test client: %v", err)
				}
				defer nc.Close()
				requestIDs(t, nc, "leaf.snowflake", 3)
				if code := stop(); code != 0 {
					t.Fatalf("exit %d:\n%s", code, logs.String())
				}
			})
			t.Run("wrong credential fails fast", func(t *testing.T) {
				wantRefused(t, authEnv(base, m.wrong), m.want, m.secret)
			})
		})
	}
}

// authEnv is env with every other authentication variable cleared and
// LEAF_NATS_URL set to base, with env's "user:password@" in it if any.
func authEnv(base string, env map[string]string) map[string]string {
	out := map[string]string{"LEAF_POSTGRES_URL": ""}
	for _, k := range authVars {
		out[k] = ""
	}
	for k, v := range env {
		out[k] = v
	}
	scheme, rest, _ := strings.Cut(base, "://")
	out["LEAF_NATS_URL"] = scheme + "://" + env["LEAF_NATS_URL"] + rest
	return out
}

// wantRefused runs the vendor with env and wants it to exit 1 soon, saying
// want and not printing secret.
func wantRefused(t *testing.T, env map[string]string, want, secret string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	t.Setenv("LEAF_HTTP_ADDR", "")
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	code := run(ctx, nil, &out, &out)
	if ctx.Err() != nil {
		t.Fatalf("vendor still running after %v with a wrong credential:\n%s", time.Since(start), out.String())
	}
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out.String())
	}
	msg := out.String()
	if !strings.Contains(strings.ToLower(msg), want) || !strings.Contains(msg, "connect to NATS") {
		t.Fatalf("message should say %q:\n%s", want, msg)
	}
	if secret != "" && strings.Contains(msg, secret) {
		t.Fatalf("message prints the secret %q:\n%s", secret, msg)
	}
}

// requestIDs asks subject for n IDs and checks the reply.
func requestIDs(t *testing.T, nc *nats.Conn, subject string, n int) []int64 {
	t.Helper()
	msg, err := nc.Request(subject, []byte(strconv.Itoa(n)), 5*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	if e := msg.Header.Get("Nats-Service-Error"); e != "" {
		t.Fatalf("request %s: %s %s", subject, msg.Header.Get("Nats-Service-Error-Code"), e)
	}
	ids, err := vending.DecodeText(nil, msg.Data)
	if err != nil || len(ids) != n {
		t.Fatalf("request %s for %d IDs: reply %q: %v", subject, n, msg.Data, err)
	}
	return ids
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newNKey(t *testing.T, create func() (nkeys.KeyPair, error)) (public string, seed []byte) {
	t.Helper()
	kp, err := create()
	if err != nil {
		t.Fatal(err)
	}
	public, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err = kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return public, seed
}

// operator is a test operator with a system account and one account with
// JetStream, served from a memory resolver.
type operator struct {
	claims   *jwt.OperatorClaims
	sysPub   string
	resolver *server.MemAccResolver
	account  nkeys.KeyPair
}

func newOperator(t *testing.T) *operator {
	t.Helper()
	must := func(kp nkeys.KeyPair, err error) (nkeys.KeyPair, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		return kp, pub
	}
	opKP, opPub := must(nkeys.CreateOperator())
	_, sysPub := must(nkeys.CreateAccount())
	accKP, accPub := must(nkeys.CreateAccount())

	oc := jwt.NewOperatorClaims(opPub)
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	if oc, err = jwt.DecodeOperatorClaims(opJWT); err != nil {
		t.Fatal(err)
	}
	sysJWT, err := jwt.NewAccountClaims(sysPub).Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	ac := jwt.NewAccountClaims(accPub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{
		MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit, Streams: jwt.NoLimit, Consumer: jwt.NoLimit,
	}
	accJWT, err := ac.Encode(opKP)
	if err != nil {
		t.Fatal(err)
	}
	r := &server.MemAccResolver{}
	for pub, jwt := range map[string]string{sysPub: sysJWT, accPub: accJWT} {
		if err := r.Store(pub, jwt); err != nil {
			t.Fatal(err)
		}
	}
	return &operator{claims: oc, sysPub: sysPub, resolver: r, account: accKP}
}

func (op *operator) configure(o *server.Options) {
	o.TrustedOperators = []*jwt.OperatorClaims{op.claims}
	o.SystemAccount = op.sysPub
	o.AccountResolver = op.resolver
}

// userCreds makes a creds file's content for a new user of account.
func (op *operator) userCreds(t *testing.T, account nkeys.KeyPair) []byte {
	t.Helper()
	userPub, seed := newNKey(t, nkeys.CreateUser)
	userJWT, err := jwt.NewUserClaims(userPub).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// testCA is a certificate authority for TLS tests.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate for 127.0.0.1 and localhost, and its key.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// TestSecurityDocsConfig runs docs/nats-server-single.conf (ports and
// store aside) and checks what docs/security.md promises: the vendor user
// can serve, a client can get IDs and nothing else (no vendor-only subject,
// no reply that writes to the vendors' state), the admin can do all.
func TestSecurityDocsConfig(t *testing.T) {
	pw := map[string]string{
		"LEAF_VENDOR_PASSWORD": "vendor-pw", "LEAF_CLIENT_PASSWORD": "client-pw",
		"LEAF_ADMIN_PASSWORD": "admin-pw", "NATS_SYS_PASSWORD": "sys-pw",
	}
	for k, v := range pw {
		t.Setenv(k, v)
	}
	s := docsServer(t, filepath.Join("..", "..", "docs", "nats-server-single.conf"))
	url := s.ClientURL()

	// The admin manages tags (here in the KV segment store, which the
	// vendor then opens; it creates the worker buckets itself).
	adminEnv := authEnv(url, map[string]string{"LEAF_NATS_USER": "leaf-admin", "LEAF_NATS_PASSWORD": pw["LEAF_ADMIN_PASSWORD"]})
	for k, v := range adminEnv {
		t.Setenv(k, v)
	}
	var out syncBuffer
	if code := run(context.Background(), []string{"tags", "add", "order", "-step", "100"}, &out, &out); code != 0 {
		t.Fatalf("admin: vendor tags add exited %d:\n%s", code, out.String())
	}
	stop, logs := startVendor(t, authEnv(url, map[string]string{
		"LEAF_NATS_USER": "leaf-vendor", "LEAF_NATS_PASSWORD": pw["LEAF_VENDOR_PASSWORD"],
	}))

	t.Run("servers sync every write", func(t *testing.T) {
		// The vendor could see the server's settings, and they are right.
		for _, bad := range []string{"cannot see whether the NATS servers sync", "syncs JetStream to disk on a timer"} {
			if strings.Contains(logs.String(), bad) {
				t.Fatalf("vendor logs %q under the shipped configuration:\n%s", bad, logs.String())
			}
		}
	})
	t.Run("status page asks the other vendors", func(t *testing.T) {
		// The cluster table's question ($SRV.STATS.leaf) is allowed: the
		// page lists this vendor, and asking again logs nothing.
		// The table waits a moment for the vendors' stats: on a loaded
		// machine an answer may miss it, so ask until three are complete.
		deadline := time.Now().Add(10 * time.Second)
		for complete := 0; complete < 3; {
			code, body := get(t, httpURL(t, logs)+"cluster.json")
			var list []status.ClusterEntry
			if code != http.StatusOK || json.Unmarshal([]byte(body), &list) != nil {
				t.Fatalf("/cluster.json under docs/nats-server.conf: %d %s", code, body)
			}
			if len(list) == 1 && list[0].Data.Ready {
				complete++
			} else if time.Now().After(deadline) {
				t.Fatalf("/cluster.json under docs/nats-server.conf does not list the ready vendor: %s", body)
			}
		}
	})
	client, clientErrs := permConn(t, url, "leaf-client", pw["LEAF_CLIENT_PASSWORD"])
	t.Run("client gets IDs", func(t *testing.T) {
		requestIDs(t, client, "leaf.snowflake", 3)
		if msg, err := client.Request("leaf.snowflake.decode", []byte("1862213154793730049"), 5*time.Second); err != nil || !strings.Contains(string(msg.Data), `"worker_id"`) {
			t.Fatalf("decode: %v %v", err, msg)
		}
		if ids := requestIDs(t, client, "leaf.segment.order", 2); ids[0] != 1 || ids[1] != 2 {
			t.Fatalf("segment IDs %v, want [1 2]", ids)
		}
		// An unknown tag waits for the store: its 404 is noted to the
		// vendor's own endpoint (leaf.waited.>).
		msg, err := client.Request("leaf.segment.nosuch", nil, 5*time.Second)
		if err != nil || msg.Header.Get("Nats-Service-Error-Code") != "404" {
			t.Fatalf("unknown tag: %v %v", err, msg)
		}
	})
	t.Run("client's replies stay in its account", func(t *testing.T) {
		// A reply subject naming a bucket key is one of the client's own
		// account, where there is no JetStream: the row is untouched.
		before := requestIDs(t, client, "leaf.segment.order", 1)[0]
		if err := client.PublishRequest("leaf.snowflake.decode", "$KV.leaf_segments.order", []byte("1862213154793730049")); err != nil {
			t.Fatal(err)
		}
		client.Flush()
		if next := requestIDs(t, client, "leaf.segment.order", 1)[0]; next != before+1 {
			t.Fatalf("after a reply sent to $KV.leaf_segments.order the next ID is %d, want %d", next, before+1)
		}
	})
	t.Run("client cannot serve or read the buckets", func(t *testing.T) {
		for _, subj := range []string{"leaf.strict.order", "leaf.waited.x"} {
			if err := client.Publish(subj, []byte("5")); err != nil {
				t.Fatal(err)
			}
			wantDenied(t, client, clientErrs, "publish", subj)
		}
		for _, subj := range []string{"leaf.>", "leaf.snowflake", "$KV.leaf_workers.>", "$SRV.>"} {
			if _, err := client.SubscribeSync(subj); err != nil {
				t.Fatal(err)
			}
			wantDenied(t, client, clientErrs, "subscription", subj)
		}
		for _, subj := range []string{"$KV.leaf_workers.worker.0", "$JS.API.STREAM.INFO.KV_leaf_workers"} {
			if err := client.Publish(subj, nil); err != nil {
				t.Fatal(err)
			}
			wantDenied(t, client, clientErrs, "publish", subj)
		}
		js, err := jetstream.New(client)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := js.KeyValue(ctx, kv.WorkersBucket); err == nil {
			t.Fatal("client opened the worker bucket")
		}
	})
	t.Run("vendor cannot manage streams", func(t *testing.T) {
		vendor, vendorErrs := permConn(t, url, "leaf-vendor", pw["LEAF_VENDOR_PASSWORD"])
		for _, subj := range []string{"$JS.API.STREAM.DELETE.KV_leaf_workers", "$JS.API.STREAM.PURGE.KV_leaf_worker_clocks", "$JS.API.STREAM.CREATE.orders"} {
			if err := vendor.Publish(subj, nil); err != nil {
				t.Fatal(err)
			}
			wantDenied(t, vendor, vendorErrs, "publish", subj)
		}
	})
	t.Run("admin can do all", func(t *testing.T) {
		admin, _ := permConn(t, url, "leaf-admin", pw["LEAF_ADMIN_PASSWORD"])
		js, err := jetstream.New(admin)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		leases, err := js.KeyValue(ctx, kv.WorkersBucket)
		if err != nil {
			t.Fatalf("admin opens %s: %v", kv.WorkersBucket, err)
		}
		if keys, err := leases.Keys(ctx); err != nil || len(keys) != 1 {
			t.Fatalf("admin lists the leases: %v, %v", keys, err)
		}
		// The vendor answers micro discovery: it may reply on $SRV.
		msg, err := admin.Request("$SRV.PING.leaf", nil, 5*time.Second)
		if err != nil || !strings.Contains(string(msg.Data), `"name":"leaf"`) {
			t.Fatalf("$SRV.PING.leaf: %v %s", err, msg.Data)
		}
	})

	if code := stop(); code != 0 {
		t.Fatalf("vendor exit %d:\n%s", code, logs.String())
	}
	if l := strings.ToLower(logs.String()); strings.Contains(l, "permissions violation") {
		t.Fatalf("the vendor user lacks a permission:\n%s", logs.String())
	}
}

// docsServer starts a server from a configuration file, on a free port, with
// no cluster, monitoring or signal handling and storage in a temp dir.
func docsServer(t *testing.T, file string) *server.Server {
	t.Helper()
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	o.Host, o.Port = "127.0.0.1", server.RANDOM_PORT
	o.HTTPHost, o.HTTPPort = "", 0
	o.Cluster = server.ClusterOpts{}
	o.Routes = nil
	o.StoreDir = t.TempDir()
	o.NoSigs, o.NoLog, o.DisableJetStreamBanner = true, true, true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	go s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("server from %s did not start", file)
	}
	return s
}

// permConn connects as user and reports the server's asynchronous errors
// (permission violations) on the channel.
func permConn(t *testing.T, url, user, password string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 64)
	nc, err := nats.Connect(url, nats.UserInfo(user, password),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// wantDenied waits for the server to refuse op ("publish" or
// "subscription") on subject.
func wantDenied(t *testing.T, nc *nats.Conn, errs <-chan error, op, subject string) {
	t.Helper()
	nc.Flush()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-errs:
			msg := strings.ToLower(err.Error())
			if errors.Is(err, nats.ErrPermissionViolation) &&
				strings.Contains(msg, op) && strings.Contains(msg, strings.ToLower(`"`+subject+`"`)) {
				return
			}
		case <-timeout:
			t.Fatalf("%s on %q was not refused", op, subject)
		}
	}
}

// editedDocsServer runs docs/nats-server-single.conf with the passwords
// set, old replaced by new in the docs file named.
func editedDocsServer(t *testing.T, file, old, new string) *server.Server {
	t.Helper()
	for k, v := range map[string]string{
		"LEAF_VENDOR_PASSWORD": "vendor-pw", "LEAF_CLIENT_PASSWORD": "client-pw",
		"LEAF_ADMIN_PASSWORD": "admin-pw", "NATS_SYS_PASSWORD": "sys-pw",
	} {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	for _, name := range []string{"nats-server-single.conf", "nats-accounts.conf"} {
		conf, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
		if err != nil {
			t.Fatal(err)
		}
		if name == file {
			if !strings.Contains(string(conf), old) {
				t.Fatalf("docs/%s has no %q", name, old)
			}
			conf = []byte(strings.Replace(string(conf), old, new, 1))
		}
		if err := os.WriteFile(filepath.Join(dir, name), conf, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return docsServer(t, filepath.Join(dir, "nats-server-single.conf"))
}

// A vendor on a server that syncs JetStream lazily says so at start, naming
// the server and the setting; on the shipped configuration it says nothing
// (TestSecurityDocsConfig).
func TestLazySyncIsWarned(t *testing.T) {
	s := editedDocsServer(t, "nats-server-single.conf", "sync_interval: always", "")
	stop, logs := startVendor(t, authEnv(s.ClientURL(), map[string]string{
		"LEAF_NATS_USER": "leaf-vendor", "LEAF_NATS_PASSWORD": "vendor-pw",
	}))
	if code := stop(); code != 0 {
		t.Fatalf("vendor exit %d:\n%s", code, logs.String())
	}
	if l := logs.String(); !strings.Contains(l, "a NATS server syncs JetStream to disk on a timer") || !strings.Contains(l, "server=leaf-1 sync_interval=2m0s") {
		t.Fatalf("no warning of the lazy sync:\n%s", logs.String())
	}
}

// TestClusterTableWithoutPermission runs docs/nats-server-single.conf
// without the vendor's permission to ask the others ($SRV.STATS.leaf):
// /cluster.json says so (the page shows it), and refreshing the page logs
// nothing more.
func TestClusterTableWithoutPermission(t *testing.T) {
	s := editedDocsServer(t, "nats-accounts.conf", `  "`+status.StatsSubject+`"`+"\n", "")
	stop, logs := startVendor(t, authEnv(s.ClientURL(), map[string]string{
		"LEAF_NATS_USER": "leaf-vendor", "LEAF_NATS_PASSWORD": "vendor-pw",
	}))
	url := httpURL(t, logs)
	for range 5 {
		code, body := get(t, url+"cluster.json")
		if code != http.StatusForbidden || !strings.Contains(body, "no permission to ask the other vendors") {
			t.Fatalf("/cluster.json without the permission: %d %s", code, body)
		}
	}
	if code := stop(); code != 0 {
		t.Fatalf("vendor exit %d:\n%s", code, logs.String())
	}
	if n := strings.Count(logs.String(), "NATS refuses this vendor's requests for the other vendors' stats"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, logs.String())
	}
	if strings.Contains(strings.ToLower(logs.String()), "permissions violation") {
		t.Errorf("the refusal was logged as a NATS error:\n%s", logs.String())
	}
}

// A vendor whose NATS user may not use the JetStream API ends at once,
// saying so, with the subject NATS refused; it does not retry for half a
// minute and blame a server without JetStream.
func TestJetStreamDeniedNamesThePermission(t *testing.T) {
	s := editedDocsServer(t, "nats-accounts.conf", `  "$JS.API.INFO"`+"\n", "")
	for k, v := range authEnv(s.ClientURL(), map[string]string{"LEAF_NATS_USER": "leaf-vendor", "LEAF_NATS_PASSWORD": "vendor-pw"}) {
		t.Setenv(k, v)
	}
	t.Setenv("LEAF_HTTP_ADDR", "")
	var out syncBuffer
	if code := run(context.Background(), nil, &out, &out); code != 1 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	msg := out.String()
	if !strings.Contains(msg, "NATS refuses this vendor's user") || !strings.Contains(msg, `$JS.API.INFO`) || strings.Contains(msg, "no JetStream") {
		t.Fatalf("the refusal is not named:\n%s", msg)
	}
	if n := strings.Count(msg, "retrying"); n > 1 {
		t.Fatalf("retried %d times a refusal waiting cannot fix:\n%s", n, msg)
	}
}
