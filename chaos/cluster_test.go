package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRestartedQueuesParsesTheWatchdogsAnswer(t *testing.T) {
	t.Parallel()
	require.Empty(t, restartedQueues("[]"))
	require.Equal(t, []string{"p.retry.1s.q", "p.retry.5s.q"},
		restartedQueues("[<<\"p.retry.1s.q\">>,\n <<\"p.retry.5s.q\">>]"))
}

// The hold report's expression goes through the same shell as the
// watchdog's (the Debian rabbitmqctl wrapper, as root) and must parse as
// Erlang expressions, as rabbitmqctl eval parses them. The parse needs
// erl, which the RabbitMQ package brings.
func TestQueueReportExprIsShellSafeAndParses(t *testing.T) {
	t.Parallel()
	expr := queueReportExpr("chaos-0a1b2c3d-cluster-server-node-kill9.")
	for _, c := range []string{"$", "`"} {
		require.NotContains(t, expr, c, "rabbitmqctl's wrapper would expand %q", c)
	}
	require.True(t, strings.HasSuffix(expr, "ok."), "rabbitmqctl eval wants a full stop at the end")
	erl, err := exec.LookPath("erl")
	if err != nil {
		t.Skip("no erl on this host")
	}
	path := filepath.Join(t.TempDir(), "report.erl")
	require.NoError(t, os.WriteFile(path, []byte(expr), 0o644))
	parse := `[F] = init:get_plain_arguments(), {ok, B} = file:read_file(F), ` +
		`{ok, Ts, _} = erl_scan:string(binary_to_list(B)), {ok, Es} = erl_parse:parse_exprs(Ts), ` +
		`io:format("~b~n", [length(Es)]), halt(0).`
	out, err := exec.Command(erl, "-noshell", "-eval", parse, "-extra", path).CombinedOutput()
	require.NoError(t, err, "erl: %s", out)
	require.Equal(t, "5", strings.TrimSpace(string(out)), "Pre, the queues' list, Names, the workers' list and ok")
}

func TestNamedTaskFindsATaskInABatchLine(t *testing.T) {
	t.Parallel()
	ids := map[string]bool{"50": true, "1200": true}
	id, ok := namedTask(`msg="worker: task failed; retrying" job_id=J task_id=50 type=flaky`, ids)
	require.True(t, ok)
	require.Equal(t, "50", id)
	id, ok = namedTask(`msg="worker: delivery" job_id=J task_id=1197 last_task=1204 tag=3`, ids)
	require.True(t, ok)
	require.Equal(t, "1200", id)
	_, ok = namedTask(`msg="worker: delivery" job_id=J task_id=1201 last_task=1204 tag=3`, ids)
	require.False(t, ok)
	_, ok = namedTask(`msg="worker: delivery" job_id=J task_id=500 tag=3`, ids)
	require.False(t, ok, "task_id=500 is not task 50")
}
