package server_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/server"
)

// HTTPS needs the certificate and the key: one alone is refused by New.
// (cmd/warren's TestServerServesHTTPS runs a server over HTTPS.)
func TestTLSFilesGoTogether(t *testing.T) {
	t.Parallel()
	for _, cfg := range []server.Config{{TLSCertFile: "cert.pem"}, {TLSKeyFile: "key.pem"}} {
		_, err := server.New(cfg)
		require.ErrorContains(t, err, "Config.TLSCertFile and Config.TLSKeyFile go together")
	}
	_, err := server.New(server.Config{TLSCertFile: "cert.pem", TLSKeyFile: "key.pem"})
	require.NoError(t, err, "the files are read at Start")
}
