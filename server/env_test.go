package server_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/server"
)

// TestConfigFromLookupReadsAsTheCommand: the values `warren server` takes
// in its own forms (a retention in days or forever, 0 as "never delete an
// idle queue", tokens with scopes), and an error that names each variable
// that does not parse.
func TestConfigFromLookupReadsAsTheCommand(t *testing.T) {
	t.Parallel()
	lookup := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	cfg, err := server.ConfigFromLookup(lookup(map[string]string{
		"WARREN_RETENTION": "forever", "WARREN_QUEUE_IDLE_DELETE": "0s", "WARREN_API_TOKENS": "t1:read+write",
		"WARREN_ALLOWED_HOSTS": " a.example,,b.example ", "WARREN_WEBHOOK_ALLOW_PRIVATE": "1",
	}))
	require.NoError(t, err)
	require.Less(t, cfg.Retention, time.Duration(0), "forever")
	require.Equal(t, time.Duration(-1), cfg.QueueIdleDelete)
	require.Len(t, cfg.Tokens, 1)
	require.Equal(t, []string{"a.example", "b.example"}, cfg.AllowedHosts)
	require.True(t, cfg.WebhookAllowPrivate)

	cfg, err = server.ConfigFromLookup(lookup(map[string]string{"WARREN_RETENTION": "30d", "WARREN_QUEUE_IDLE_DELETE": "2h"}))
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, cfg.Retention)
	require.Equal(t, 2*time.Hour, cfg.QueueIdleDelete)

	_, err = server.ConfigFromLookup(lookup(map[string]string{
		"WARREN_RETENTION": "soon", "WARREN_MAX_BODY": "64MiB", "WARREN_WEBHOOK_ALLOW_PRIVATE": "yes", "WARREN_API_TOKENS": "t1:root",
	}))
	require.Error(t, err)
	for _, want := range []string{`WARREN_RETENTION: "soon" is not a retention`, `WARREN_MAX_BODY: "64MiB" is not a whole number`,
		`WARREN_WEBHOOK_ALLOW_PRIVATE: "yes" is not a boolean`, `WARREN_API_TOKENS: `} {
		require.Contains(t, err.Error(), want)
	}
	require.NotContains(t, err.Error(), "t1", "a token is never shown")
}
