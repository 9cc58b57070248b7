package worker_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A worker exports no metrics, so a program that imports only the worker
// does not link the Prometheus client (nor the server's engine). It makes
// spans with the OpenTelemetry API alone: the SDK and the exporters are
// the program's choice (cmd/warren's internal/tracing), not linked in.
func TestWorkerDoesNotDependOnPrometheusOrTheServer(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the test lists the worker's dependencies with the go command")
	out, err := exec.Command(goTool, "list", "-deps", "github.com/warrenhq/warren/worker").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.NotContains(t, dep, "prometheus", "the worker depends on %s", dep)
		for _, sdk := range []string{"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "/internal/tracing"} {
			require.NotContains(t, dep, sdk, "the worker depends on %s", dep)
		}
		for _, engine := range []string{"/internal/relay", "/internal/aggregator", "/internal/api", "/server", "/store"} {
			require.False(t, strings.HasSuffix(dep, engine), "the worker depends on %s", dep)
		}
	}
}
