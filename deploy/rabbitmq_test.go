package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/warrenhq/warren/deploy"
)

// The watchdog's expression goes through a shell when the Debian
// package's rabbitmqctl wrapper runs as root (it re-quotes double quotes,
// but a dollar sign or a backquote would be expanded), and the embedded
// copy is what the chaos cluster target runs.
func TestDeadLetterWorkerRestartIsShellSafe(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("rabbitmq", "dlx-worker-restart.erl"))
	require.NoError(t, err)
	require.Equal(t, string(b), deploy.DeadLetterWorkerRestart, "the embedded expression is the file's")
	for _, c := range []string{"$", "`"} {
		require.NotContains(t, deploy.DeadLetterWorkerRestart, c, "rabbitmqctl's wrapper would expand %q", c)
	}
	require.True(t, strings.HasSuffix(strings.TrimSpace(deploy.DeadLetterWorkerRestart), "]."),
		"rabbitmqctl eval wants expressions ending with a full stop, the last one the list it prints")

	script, err := os.ReadFile(filepath.Join("rabbitmq", "dlx-worker-restart.sh"))
	require.NoError(t, err)
	require.Contains(t, string(script), `"$dir/dlx-worker-restart.erl"`, "the script runs the expression next to it")
}

// The expression must parse as Erlang expressions, as rabbitmqctl eval
// parses it (erl_scan, erl_parse). It needs erl, which the RabbitMQ
// package brings.
func TestDeadLetterWorkerRestartParses(t *testing.T) {
	t.Parallel()
	erl, err := exec.LookPath("erl")
	if err != nil {
		t.Skip("no erl on this host")
	}
	parse := `[F] = init:get_plain_arguments(), {ok, B} = file:read_file(F), ` +
		`{ok, Ts, _} = erl_scan:string(binary_to_list(B)), {ok, Es} = erl_parse:parse_exprs(Ts), ` +
		`io:format("~b~n", [length(Es)]), halt(0).`
	out, err := exec.Command(erl, "-noshell", "-eval", parse, "-extra", filepath.Join("rabbitmq", "dlx-worker-restart.erl")).CombinedOutput()
	require.NoError(t, err, "erl: %s", out)
	require.Equal(t, "5", strings.TrimSpace(string(out)), "Now, Held, IsLocalLeader, Stuck and the list of the restarted")
}
