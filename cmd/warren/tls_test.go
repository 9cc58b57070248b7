package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker/amqptest"
)

// testPKI is a private CA and a certificate it signed for 127.0.0.1 and
// localhost, as PEM files.
type testPKI struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "warren test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "warren test server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)

	p := testPKI{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"),
		pool: x509.NewCertPool()}
	p.pool.AddCert(caCert)
	write := func(path, typ string, der []byte) {
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
	}
	write(p.caFile, "CERTIFICATE", caDER)
	write(p.certFile, "CERTIFICATE", leafDER)
	write(p.keyFile, "EC PRIVATE KEY", keyDER)
	return p
}

// `warren server --tls-cert --tls-key` serves HTTPS, TLS 1.2 at least;
// client commands reach it through an https:// WARREN_SERVER, trusting
// the private CA given with --ca-cert or WARREN_CA_CERT, and refuse it
// without.
func TestServerServesHTTPS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	names, _ := amqptest.Topology(t, nil)
	addr := freeAddr(t)
	env := []string{
		"WARREN_AMQP_URL=" + amqptest.URL(),
		"WARREN_DATABASE_URL=sqlite://" + filepath.Join(t.TempDir(), "warren.db"),
		"WARREN_PREFIX=" + names.Prefix,
		"WARREN_LISTEN=" + addr,
		"WARREN_TLS_CERT=" + pki.certFile,
		"WARREN_TLS_KEY=" + pki.keyFile,
	}
	server := start(t, env, "server")
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool}}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := hc.Get("https://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "server not ready: %v\n%s", err, server.out)
		time.Sleep(50 * time.Millisecond)
	}
	require.Contains(t, server.out.String(), "api=https://"+addr)

	// TLS 1.1 is refused.
	old := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.pool, MaxVersion: tls.VersionTLS11}}}
	_, err := old.Get("https://" + addr + "/readyz")
	require.Error(t, err)

	clientEnv := []string{"WARREN_SERVER=https://" + addr}
	code, out, errOut := runBinary(t, clientEnv, "list", "--json", "--ca-cert", pki.caFile)
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"jobs": [], "next_cursor": null}`, out)

	spec := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(spec, []byte(`{"type":"echo","tasks":[1]}`), 0o644))
	withCA := append([]string{"WARREN_CA_CERT=" + pki.caFile}, clientEnv...)
	code, out, errOut = runBinary(t, withCA, "submit", spec, "--json")
	require.Equal(t, 0, code, errOut)
	var job struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(out), &job))
	code, out, errOut = runBinary(t, withCA, "status", job.ID)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "job       "+job.ID)

	code, _, errOut = runBinary(t, clientEnv, "list")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "certificate signed by unknown authority")
	code, _, errOut = runBinary(t, []string{"WARREN_SERVER=http://" + addr}, "list")
	require.Equal(t, exitError, code, "plain HTTP to an HTTPS server: %s", errOut)
	code, _, errOut = runBinary(t, clientEnv, "list", "--ca-cert", spec)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--ca-cert: "+spec+" holds no PEM certificate")

	require.Equal(t, 0, server.stop(t), "server:\n%s", server.out)
}

// TLS settings are checked before anything starts: both files or
// neither, files that hold a certificate and its key, and no
// non-loopback address without tokens, TLS or not.
func TestServerTLSSettings(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	db := "sqlite://" + filepath.Join(t.TempDir(), "w.db")
	for _, tc := range []struct {
		vars map[string]string
		args []string
		code int
		want string
	}{
		{nil, []string{"--tls-cert", pki.certFile}, exitUsage, "--tls-cert is set but not --tls-key: HTTPS needs both, or neither"},
		{map[string]string{"WARREN_TLS_KEY": pki.keyFile}, nil, exitUsage, "WARREN_TLS_KEY is set but not --tls-cert"},
		{map[string]string{"WARREN_LISTEN": "0.0.0.0:0"}, []string{"--tls-cert", pki.certFile, "--tls-key", pki.keyFile}, exitUsage,
			`WARREN_LISTEN: refusing to listen on "0.0.0.0:0" without API tokens: set --api-tokens, or listen on a loopback address`},
		{map[string]string{"WARREN_AMQP_URL": amqptest.URL(), "WARREN_LISTEN": "127.0.0.1:0", "WARREN_DATABASE_URL": db,
			"WARREN_PREFIX": fmt.Sprintf("wt-%d-tls-", time.Now().UnixNano())}, // refused before the broker is touched, but never the default names
			[]string{"--tls-cert", pki.caFile, "--tls-key", pki.caFile}, exitError, "TLS certificate " + pki.caFile},
	} {
		code, _, errOut := runCLI(t, tc.vars, append([]string{"server"}, tc.args...)...)
		require.Equal(t, tc.code, code, "%v %v: %s", tc.vars, tc.args, errOut)
		require.Contains(t, errOut, tc.want)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "one line: %q", errOut)
	}
}
