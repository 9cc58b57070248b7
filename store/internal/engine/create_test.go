package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/store"
)

func TestValidateNewJob(t *testing.T) {
	t.Parallel()
	require.NoError(t, validateNewJob(store.NewJob{Type: "t"}))
	require.NoError(t, validateNewJob(store.NewJob{Type: "t", Policy: warren.Policy{MaxRetries: 3, BatchSize: warren.MaxBatchSize}}))
	bad := warren.Policy{TaskTimeout: time.Millisecond}
	err := validateNewJob(store.NewJob{Type: "t", Policy: bad})
	require.Error(t, err)
	require.ErrorContains(t, err, bad.Validate().Error(), "the error says what is wrong with the policy")
}
