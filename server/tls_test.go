package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/server"
)

// HTTPS needs the certificate and the key: one alone is refused by New.
// (cmd/warren's TestServerServesHTTPS runs a server over HTTPS.)
func TestTLSFilesGoTogether(t *testing.T) {
	t.Parallel()
	for _, cfg := range []server.Config{{TLSCertFile: "cert.pem"}, {TLSKeyFile: "key.pem"}} {
		_, err := server.New(cfg)
		require.ErrorContains(t, err, "is set but not Config.TLS")
		require.ErrorContains(t, err, ": HTTPS needs both, or neither")
	}
	_, err := server.New(server.Config{TLSCertFile: "cert.pem", TLSKeyFile: "key.pem"})
	require.NoError(t, err, "the files are read at Start")
}

// A certificate that cannot be loaded fails Start before anything is
// touched: no store file created, no queue declared.
func TestABadCertificateFailsStartBeforeAnythingElse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "not-a-cert.pem")
	require.NoError(t, os.WriteFile(bad, []byte("not a certificate"), 0o600))
	db := filepath.Join(dir, "warren.db")
	prefix := fmt.Sprintf("wt-%d-tls-", time.Now().UnixNano())
	srv, err := server.New(server.Config{AMQPURL: amqptest.URL(), DatabaseURL: "sqlite://" + db, Prefix: prefix,
		Listen: "127.0.0.1:0", TLSCertFile: bad, TLSKeyFile: bad})
	require.NoError(t, err)
	err = srv.Start(t.Context())
	require.ErrorContains(t, err, "TLS certificate "+bad)
	require.NoFileExists(t, db, "the store was not opened")
	ch, err := amqptest.Dial(t).Channel()
	require.NoError(t, err)
	_, err = ch.QueueDeclarePassive(prefix+"tasks.q", true, false, false, false, nil)
	var amqpErr *amqp.Error
	require.ErrorAs(t, err, &amqpErr, "no topology declared")
	require.Equal(t, amqp.NotFound, amqpErr.Code)
}
