package envconfig_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/internal/envconfig"
)

type conf struct {
	N     int
	D     time.Duration
	Hosts []string
}

var vars = []envconfig.Var[conf]{
	{Name: "X_N", Flag: "n", Set: envconfig.Int(func(c *conf) *int { return &c.N })},
	{Name: "X_D", Flag: "d", Set: envconfig.Duration(func(c *conf) *time.Duration { return &c.D })},
	{Name: "X_HOSTS", Flag: "hosts", Set: envconfig.List(func(c *conf) *[]string { return &c.Hosts })},
}

// TestApplySetsWhatIsGivenAndNamesWhatIsWrong: a blank value leaves its
// field alone; each value that does not parse is an *Error naming its
// variable and flag, all of them joined, and the good ones are set.
func TestApplySetsWhatIsGivenAndNamesWhatIsWrong(t *testing.T) {
	t.Parallel()
	c := conf{N: 7}
	lookup := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	require.NoError(t, envconfig.Apply(&c, vars, lookup(map[string]string{"X_N": "  ", "X_HOSTS": "a, ,b"})))
	require.Equal(t, conf{N: 7, Hosts: []string{"a", "b"}}, c)

	err := envconfig.Apply(&c, vars, lookup(map[string]string{"X_N": "x", "X_D": "5", "X_HOSTS": "c"}))
	require.EqualError(t, err, "X_N: \"x\" is not a whole number\nX_D: \"5\" is not a duration (like 500ms, 30s, 2m)")
	e, ok := errors.AsType[*envconfig.Error](err)
	require.True(t, ok)
	require.Equal(t, "n", e.Flag)
	require.Equal(t, []string{"c"}, c.Hosts)
}

func TestParseRetention(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"forever": envconfig.KeepForever, "FOREVER": envconfig.KeepForever,
		"30d": 30 * 24 * time.Hour, "168h": 168 * time.Hour, "1s": time.Second, "168h0m0s": 168 * time.Hour} {
		got, err := envconfig.ParseRetention(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "0d", "-1d", "500ms", "soon", "1.5d"} {
		_, err := envconfig.ParseRetention(in)
		require.Error(t, err, in)
	}
}
