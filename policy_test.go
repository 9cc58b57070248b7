package warren_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
)

// A job's own retention is 0 (the server's) or between a second and
// MaxRetention; anything else names the field.
func TestPolicyValidateRetention(t *testing.T) {
	t.Parallel()
	for _, ok := range []time.Duration{0, time.Second, 90 * 24 * time.Hour, warren.MaxRetention} {
		require.NoError(t, warren.Policy{Retention: ok}.Validate(), "retention %s", ok)
	}
	for _, bad := range []time.Duration{-time.Second, time.Millisecond, warren.MaxRetention + time.Second} {
		require.ErrorContains(t, warren.Policy{Retention: bad}.Validate(), "retention must be", "retention %s", bad)
	}
}
