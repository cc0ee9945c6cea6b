package fleet_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// TLS with a throwaway CA, and an ACL user limited to one prefix of keys.
func TestTLSAndACL(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	dir := t.TempDir()
	caPool, files := makeCerts(t, dir)
	s, err := fleettest.StartServer(c, fleettest.Config{TLS: &files})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if _, err := s.Cli(c, "acl", "setuser", "alice", "on", ">s3cret", "~tenant1:*", "&tenant1:*", "+@all", "-@admin"); err != nil {
		t.Fatal(err)
	}
	url := "rediss://alice:s3cret@127.0.0.1:" + strconv.Itoa(s.TLSPort)
	trusted := &tls.Config{RootCAs: caPool}

	f, err := fleet.Open(c, fleet.Options{URL: url, TLSConfig: trusted, Prefix: "tenant1:"})
	if err != nil {
		t.Fatalf("Open over TLS with ACL: %v", err)
	}
	defer f.Close()
	if err := f.KV("ns").Set(c, "k", "v", 0); err != nil {
		t.Fatal(err)
	}
	if v, _, err := f.KV("ns").GetString(c, "k"); err != nil || v != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	l, err := f.Lock("l").Acquire(c, fleet.LockOptions{Hold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(c); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Cli(c, "get", "tenant1:fleet:kv:ns:k"); err != nil || got != `"v"` {
		t.Fatalf("stored %q, %v", got, err)
	}

	// Keys outside the user's pattern are refused, and nothing is written.
	// Open reads the layout marker under its prefix, so it fails at once.
	if _, err := fleet.Open(c, fleet.Options{URL: url, TLSConfig: trusted, Prefix: "tenant2:"}); !errors.Is(err, fleet.ErrAuth) {
		t.Fatalf("Open outside the ACL = %v, want ErrAuth", err)
	}
	if n, _ := s.Cli(c, "dbsize"); n != "3" { // the KV key, the lock's fence, the marker
		t.Fatalf("dbsize %s, want 3", n)
	}

	// A wrong password.
	bad := "rediss://alice:wrong@127.0.0.1:" + strconv.Itoa(s.TLSPort)
	if _, err := fleet.Open(c, fleet.Options{URL: bad, TLSConfig: trusted}); !errors.Is(err, fleet.ErrAuth) {
		t.Fatalf("wrong password: %v, want ErrAuth", err)
	}
	// An untrusted certificate (system roots do not know the throwaway CA).
	// (The handshake's error comes as soon as it ends: the DialTimeout only
	// bounds a starved machine, where 2 s was once too short.)
	_, err = fleet.Open(c, fleet.Options{URL: url, DialTimeout: 20 * time.Second})
	var unknown x509.UnknownAuthorityError
	if !errors.Is(err, fleet.ErrUnavailable) || !errors.As(err, &unknown) {
		t.Fatalf("untrusted certificate: %v, want ErrUnavailable wrapping x509.UnknownAuthorityError", err)
	}
}

// makeCerts writes a CA and a server certificate for 127.0.0.1.
func makeCerts(t *testing.T, dir string) (*x509.CertPool, fleettest.TLS) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "fleet test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	files := fleettest.TLS{
		CAFile:   write("ca.pem", "CERTIFICATE", caDER),
		CertFile: write("server.pem", "CERTIFICATE", leafDER),
		KeyFile:  write("server.key", "EC PRIVATE KEY", keyDER),
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool, files
}
