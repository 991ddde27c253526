package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TLSFiles are PEM files of a private CA made at test time: a server
// certificate for 127.0.0.1, localhost and ServerName, and a client
// certificate, all signed by the CA.
type TLSFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
	// ServerName is a DNS name in the server certificate that is not the
	// address dialled, for redis.tls.server_name.
	ServerName string
}

// NewTLSFiles writes a fresh CA and its server and client certificates
// (ECDSA P-256, valid for a day) to a temporary directory.
func NewTLSFiles(t testing.TB) TLSFiles {
	t.Helper()
	dir := t.TempDir()
	f := TLSFiles{
		CA: filepath.Join(dir, "ca.pem"), ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"), ServerName: "redis.seckill.test",
	}
	caKey, caDER := newCert(t, nil, nil, &x509.Certificate{
		Subject: pkix.Name{CommonName: "seckill-proxy test CA"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	})
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, f.CA, "CERTIFICATE", caDER)
	srvKey, srvDER := newCert(t, ca, caKey, &x509.Certificate{
		Subject: pkix.Name{CommonName: "redis"}, DNSNames: []string{"localhost", f.ServerName},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	writePEM(t, f.ServerCert, "CERTIFICATE", srvDER)
	writeKey(t, f.ServerKey, srvKey)
	cliKey, cliDER := newCert(t, ca, caKey, &x509.Certificate{
		Subject: pkix.Name{CommonName: "seckill-proxy"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	writePEM(t, f.ClientCert, "CERTIFICATE", cliDER)
	writeKey(t, f.ClientKey, cliKey)
	return f
}

// ClientConfig is a tls.Config that trusts the CA and presents the client
// certificate, for test inspection of a TLS server.
func (f TLSFiles) ClientConfig(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	kp, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}
}

func newCert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t testing.TB, path string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}

// StartTLS runs a single redis-server that listens only on a TLS port
// (--port 0), with f's server certificate and CA. It requires client
// certificates (tls-auth-clients yes) unless authClients is false.
func StartTLS(t testing.TB, f TLSFiles, authClients bool, extra ...string) *Server {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		t.Fatalf("redis-server not found on PATH (run: apt-get install -y redis-server): %v", err)
	}
	auth := "yes"
	if !authClients {
		auth = "no"
	}
	s := &Server{Dir: DataDir(t), tls: f.ClientConfig(t)}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s.Port = FreePort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.Port)
		s.args = append([]string{"--port", "0", "--tls-port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
			"--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey, "--tls-ca-cert-file", f.CA,
			"--tls-auth-clients", auth,
			"--save", "", "--appendonly", "no", "--dir", s.Dir, "--logfile", filepath.Join(s.Dir, "redis.log")}, extra...)
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Kill)
			return s
		}
		if msg := strings.ToLower(lastErr.Error()); strings.Contains(msg, "bad directive") || strings.Contains(msg, "tls is not supported") ||
			strings.Contains(msg, "not built with tls") || strings.Contains(msg, "failed to configure tls") {
			t.Skipf("the installed %s cannot serve TLS (a build without BUILD_TLS=yes; Debian's redis-server has it): %v", Binary, lastErr)
		}
	}
	t.Fatalf("redis-server with TLS did not start: %v", lastErr)
	return nil
}
