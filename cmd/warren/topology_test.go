package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren"
	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/store"
	"github.com/warrenhq/warren/store/sqlite"
)

// warren topology delete removes every queue and exchange of its prefix,
// the work queues per type its store knows included, and refuses while a
// queue has a consumer unless --force. It only ever runs on the test's
// own prefix.
func TestTopologyDeleteRemovesAWholePrefix(t *testing.T) {
	t.Parallel()
	names, admin := amqptest.Topology(t, nil)
	t.Cleanup(func() { _ = broker.DeleteWorkQueue(admin, names, "gpu") })
	dbPath := filepath.Join(t.TempDir(), "w.db")
	st, err := sqlite.Open(context.Background(), dbPath)
	require.NoError(t, err)
	tasks := func(yield func(json.RawMessage, error) bool) { yield(json.RawMessage(`{}`), nil) }
	_, _, err = st.CreateJob(context.Background(), store.NewJob{Type: "render", Policy: warren.Policy{Queue: "gpu", Reduce: "collect"}}, tasks)
	require.NoError(t, err)
	require.NoError(t, st.Close())
	require.NoError(t, broker.DeclareWorkQueue(admin, names, "gpu", nil))
	vars := map[string]string{"WARREN_AMQP_URL": amqptest.URL(), "WARREN_DATABASE_URL": "sqlite://" + dbPath}

	code, _, errOut := runCLI(t, vars, "topology", "delete")
	require.Equal(t, exitUsage, code, "no prefix: %s", errOut)

	ch, _, err := broker.Consume(admin, names.WorkQueue("gpu"), "", 1)
	require.NoError(t, err)
	code, out, errOut := runCLI(t, vars, "topology", "delete", "--prefix", names.Prefix)
	require.Equal(t, exitError, code, "%s %s", out, errOut)
	require.Contains(t, errOut, names.WorkQueue("gpu")+" (1 consumers)")
	require.Contains(t, errOut, "--force")
	require.Empty(t, out, "nothing deleted")
	require.NoError(t, ch.Close())

	code, out, errOut = runCLI(t, vars, "topology", "delete", "--prefix", names.Prefix)
	require.Equal(t, exitOK, code, "%s %s", out, errOut)
	for _, q := range broker.InstallationQueues(names, []string{"gpu"}) {
		require.Contains(t, out, "deleted queue "+q+" (0 messages)\n")
	}
	require.Contains(t, out, "deleted exchange "+names.JobsExchange+"\n")

	code, out, _ = runCLI(t, vars, "topology", "delete", "--prefix", names.Prefix)
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "nothing of prefix")
}
