package worker_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/worker"
)

func TestPermanent(t *testing.T) {
	t.Parallel()
	cause := &fs.PathError{Op: "open", Path: "in.json", Err: fs.ErrNotExist}
	err := fmt.Errorf("load: %w", worker.Permanent(cause))

	require.True(t, worker.IsPermanent(err))
	require.ErrorIs(t, err, worker.ErrPermanent)
	require.ErrorIs(t, err, fs.ErrNotExist, "Permanent keeps what it wraps visible")
	var pathErr *fs.PathError
	require.ErrorAs(t, err, &pathErr)
	require.Equal(t, "load: "+cause.Error(), err.Error(), "Permanent adds nothing to the text")

	require.False(t, worker.IsPermanent(cause))
	require.False(t, errors.Is(cause, worker.ErrPermanent))
	require.False(t, worker.IsPermanent(nil))
	require.NoError(t, worker.Permanent(nil))
}
