package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCapRoomIsTheCapLessWhatIsInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		row         PendingJobRow
		room        int
		wantCapped  bool
		description string
	}{
		{"uncapped", PendingJobRow{InFlight: 7}, 0, false, "no cap: the round shares it as any job"},
		{"room left", PendingJobRow{MaxConcurrency: 5, InFlight: 2}, 3, true, "the cap less the queued tasks"},
		{"full", PendingJobRow{MaxConcurrency: 3, InFlight: 3}, 0, true, "no room"},
		{"over", PendingJobRow{MaxConcurrency: 3, InFlight: 5}, 0, true, "a replay took it over: never below 0"},
		{"busy", PendingJobRow{MaxConcurrency: 5, Busy: true}, 0, true, "another round holds its claim"},
	} {
		room, capped := capRoom(tc.row)
		require.Equal(t, [2]any{tc.room, tc.wantCapped}, [2]any{room, capped}, "%s: %s", tc.name, tc.description)
	}
}
