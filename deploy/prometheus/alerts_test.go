// Package prometheus_test checks the example alert rules in alerts.yml.
package prometheus_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// With promtool (Debian package prometheus; .ci/run installs it), the rules
// are checked and their unit tests in alerts_test.yml run.
func TestAlertRulesWithPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		// Without promtool, TestAlertRulesParse still checks the file.
		t.Log("promtool not installed (apt-get install prometheus); checked by the parse test only")
		return
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %v:\n%s", args, out)
	}
}

// The rules file parses, every rule is complete, and the dead-letter
// alert is per routing key.
func TestAlertRulesParse(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("alerts.yml")
	require.NoError(t, err)
	var doc struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&doc))
	require.Len(t, doc.Groups, 1)
	alerts := map[string]string{}
	for _, r := range doc.Groups[0].Rules {
		require.NotEmpty(t, r.Alert)
		require.NotEmpty(t, r.Expr, r.Alert)
		require.Regexp(t, `^\d+[smh]$`, r.For, r.Alert)
		require.Contains(t, []string{"warning", "critical"}, r.Labels["severity"], r.Alert)
		require.NotEmpty(t, r.Annotations["summary"], r.Alert)
		require.NotEmpty(t, r.Annotations["description"], r.Alert)
		alerts[r.Alert] = r.Expr
	}
	require.Regexp(t, regexp.MustCompile(`sum by \(routing_key\) \(increase\(warren_dead_letters_total\[`), alerts["WarrenDeadLettersGrowing"])
	require.Contains(t, alerts["WarrenDeadLetterQueueGrowing"], "warren_queue_messages")
	require.Contains(t, alerts["WarrenRelayBacklogStuck"], "warren_relay_backlog")
}
