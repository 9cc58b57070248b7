package reduce_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/reduce"
)

// counter is a custom reducer: it counts completed and failed tasks.
type counter struct{ completed, failed int }

func (c *counter) Add(_ int64, failed bool, _ json.RawMessage) error {
	if failed {
		c.failed++
	} else {
		c.completed++
	}
	return nil
}

func (c *counter) Result() ([]byte, error) {
	return fmt.Appendf(nil, `{"completed":%d,"failed":%d}`, c.completed, c.failed), nil
}

// newCounter is the Factory of counter.
func newCounter() reduce.Reducer { return &counter{} }

func TestRegister(t *testing.T) {
	t.Parallel()
	reg := reduce.NewRegistry()
	require.NoError(t, reg.Register("count", newCounter))

	_, ok := reg.Lookup("count")
	require.True(t, ok)
	names := reg.Names()
	require.Contains(t, names, "count")
	require.True(t, slices.IsSorted(names), "names not sorted: %v", names)

	out, err := reg.Reduce("count", scanOf(`1`, failedTask, `3`))
	require.NoError(t, err)
	require.JSONEq(t, `{"completed":2,"failed":1}`, string(out))

	// Each job gets a fresh reducer.
	out, err = reg.Reduce("count", scanOf(`1`))
	require.NoError(t, err)
	require.JSONEq(t, `{"completed":1,"failed":0}`, string(out))
}

func TestRegisterErrors(t *testing.T) {
	t.Parallel()
	reg := reduce.NewRegistry()
	require.NoError(t, reg.Register("dup", newCounter))
	before := reg.Names()

	require.ErrorContains(t, reg.Register("dup", newCounter), `Register("dup"): a reducer of that name is already registered`, "duplicate")
	require.ErrorContains(t, reg.Register("collect", newCounter), `Register("collect"): a reducer of that name is already registered`, "duplicate of a built-in")
	require.ErrorContains(t, reg.Register("", newCounter), "the reducer name is empty", "empty name")
	require.ErrorContains(t, reg.Register("nil", nil), `Register("nil"): the Factory is nil`, "nil func")

	require.Equal(t, before, reg.Names(), "a refused registration changed the registry")
	out, err := reg.Reduce("collect", scanOf(`1`))
	require.NoError(t, err)
	require.Equal(t, `[1]`, string(out), "the built-in was replaced")
}

func TestRegisterConcurrently(t *testing.T) {
	t.Parallel()
	reg := reduce.NewRegistry()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := fmt.Sprintf("concurrent-%d", i)
			require.NoError(t, reg.Register(name, newCounter))
			_, ok := reg.Lookup(name)
			require.True(t, ok)
			require.Contains(t, reg.Names(), name)
			_, err := reg.Reduce(name, scanOf(`1`))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	require.Len(t, reg.Names(), 5+8)
}

func TestNamesHasBuiltins(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"collect", "concat", "merge", "none", "sum"}, reduce.NewRegistry().Names())
}

// Registries share nothing: a server's custom reducers are its own.
func TestRegistriesAreIndependent(t *testing.T) {
	t.Parallel()
	one, other := reduce.NewRegistry(), reduce.NewRegistry()
	require.NoError(t, one.Register("count", newCounter))

	_, ok := other.Lookup("count")
	require.False(t, ok, "a reducer registered in one registry is seen by another")
	require.NoError(t, other.Register("count", newCounter), "the name is taken in another registry")
}

func TestZeroRegistryHoldsNothing(t *testing.T) {
	t.Parallel()
	var reg reduce.Registry
	require.Empty(t, reg.Names())
	_, err := reg.Reduce(reduce.Default, scanOf(`1`))
	require.ErrorIs(t, err, reduce.ErrUnknownReducer)

	require.NoError(t, reg.Register("count", newCounter))
	require.Equal(t, []string{"count"}, reg.Names())
}
