package client_test

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/client"
)

// WithRootCAs trusts a private CA (LoadCAFile reads it); without it the
// server's certificate is refused.
func TestWithRootCAs(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jobs":[],"next_cursor":null}`))
	}))
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	_, err := client.New(srv.URL).List(context.Background(), nil)
	require.ErrorContains(t, err, "certificate")

	pool, err := client.LoadCAFile(caFile)
	require.NoError(t, err)
	list, err := client.New(srv.URL, client.WithRootCAs(pool)).List(context.Background(), nil)
	require.NoError(t, err)
	require.Empty(t, list.Jobs)

	_, err = client.LoadCAFile(filepath.Join(t.TempDir(), "missing.pem"))
	require.Error(t, err)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	_, err = client.LoadCAFile(notPEM)
	require.ErrorContains(t, err, "holds no PEM certificate")
}

// With WithGiveUpAfter, Wait and Watch end with ErrUnreachable once the
// server has not answered for that long.
func TestGiveUpAfter(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	c := client.New(base, client.WithGiveUpAfter(300*time.Millisecond))
	start := time.Now()
	_, err = c.Wait(context.Background(), "some-job", nil)
	require.ErrorIs(t, err, client.ErrUnreachable)
	_, err = c.Watch(context.Background(), "some-job", nil)
	require.ErrorIs(t, err, client.ErrUnreachable)
	require.Less(t, time.Since(start), 5*time.Second)
}
