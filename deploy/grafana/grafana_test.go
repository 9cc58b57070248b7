// Package grafana_test checks the Grafana dashboard warren.json (and the
// example alert rules) against the metrics warren's code exports.
package grafana_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/warrenhq/warren/internal/broker"
	"github.com/warrenhq/warren/internal/broker/amqptest"
	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker/workermetrics"
)

// metricName finds the metric names in a PromQL expression: warren's own
// and those of the Go and process collectors. Label names, functions and
// Grafana's variables never start with these.
var metricName = regexp.MustCompile(`\b(?:warren|go|process)_[a-zA-Z0-9_]*`)

// descName reads the name out of a prometheus.Desc's String().
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// exported returns the names of every metric the server's registry and a
// worker's (workermetrics, with the Go and process collectors, as `warren
// worker --metrics-listen` builds it) describe, whether or not they have
// been observed yet.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names, _ := amqptest.Topology(t, &broker.TopologyOptions{})
	srv, err := server.New(server.Config{AMQPURL: amqptest.URL(), Prefix: names.Prefix, Listen: "127.0.0.1:0",
		DatabaseURL: "sqlite://" + filepath.Join(t.TempDir(), "warren.db")})
	require.NoError(t, err)
	require.NoError(t, srv.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })

	workerReg := prometheus.NewRegistry()
	workerReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	_, err = workermetrics.New(workerReg)
	require.NoError(t, err)

	out := map[string]bool{}
	for _, reg := range []*prometheus.Registry{srv.Registry(), workerReg} {
		descs := make(chan *prometheus.Desc)
		go func() {
			reg.Describe(descs)
			close(descs)
		}()
		for d := range descs {
			m := descName.FindStringSubmatch(d.String())
			require.NotNil(t, m, "%s", d)
			out[m[1]] = true
		}
	}
	require.True(t, out["warren_job_duration_seconds"], "the server's registry is read")
	require.True(t, out["warren_worker_tasks_total"], "the worker's registry is read")
	return out
}

// known reports whether name, from PromQL, is an exported metric, or the
// _bucket, _sum or _count series of one (a histogram's or a summary's).
func known(exported map[string]bool, name string) bool {
	if exported[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && exported[base] {
			return true
		}
	}
	return false
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title  string  `json:"title"`
	Inputs []input `json:"__inputs"`
	Panels []panel `json:"panels"`
}

type input struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	PluginID string `json:"pluginId"`
}

type panel struct {
	Title      string     `json:"title"`
	Type       string     `json:"type"`
	Datasource datasource `json:"datasource"`
	Targets    []struct {
		Expr       string     `json:"expr"`
		Datasource datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// exprs returns every panel's PromQL expressions, by panel title, checking
// that each panel reads the datasource variable.
func exprs(t *testing.T, panels []panel) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range panels {
		if p.Type == "row" {
			for title, es := range exprs(t, p.Panels) {
				out[title] = append(out[title], es...)
			}
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		require.Equal(t, "${DS_PROMETHEUS}", p.Datasource.UID, "panel %q", p.Title)
		for _, tg := range p.Targets {
			require.Equal(t, "${DS_PROMETHEUS}", tg.Datasource.UID, "panel %q", p.Title)
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	return out
}

// Every metric the dashboard queries is one the code exports, the
// datasource is the DS_PROMETHEUS variable, and no query names a queue
// with a prefix (the dashboard works under any WARREN_PREFIX); the alert
// rules' metrics are exported too.
func TestDashboardAndAlertsUseExportedMetrics(t *testing.T) {
	t.Parallel()
	names := exported(t)

	raw, err := os.ReadFile("warren.json")
	require.NoError(t, err)
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(raw))
	require.NoError(t, dec.Decode(&d))
	require.Equal(t, "warren", d.Title)
	require.Equal(t, []input{{Name: "DS_PROMETHEUS", Type: "datasource", PluginID: "prometheus"}}, d.Inputs)

	panels := exprs(t, d.Panels)
	require.GreaterOrEqual(t, len(panels), 15)
	var used []string
	for title, es := range panels {
		for _, e := range es {
			found := metricName.FindAllString(e, -1)
			require.NotEmpty(t, found, "panel %q: %s names no metric", title, e)
			for _, name := range found {
				require.True(t, known(names, name), "panel %q queries %s, which warren does not export", title, name)
				used = append(used, name)
			}
			require.NotContains(t, e, ".q\"", "panel %q names a queue: %s", title, e)
		}
	}
	for _, want := range []string{
		"warren_jobs_submitted_total", "warren_jobs_closed_total", "warren_job_duration_seconds_bucket",
		"warren_tasks_recorded_total", "warren_relay_backlog", "warren_relay_published_total",
		"warren_queue_messages", "warren_queue_consumers", "warren_dead_letters_total",
		"warren_worker_tasks_total", "warren_worker_handler_duration_seconds_bucket", "warren_worker_tasks_in_flight",
		"warren_worker_reconnects_total", "warren_api_requests_total", "warren_api_request_duration_seconds_bucket",
	} {
		require.True(t, slices.Contains(used, want), "no panel shows %s", want)
	}

	raw, err = os.ReadFile("../prometheus/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			found := metricName.FindAllString(r.Expr, -1)
			require.NotEmpty(t, found, "alert %s names no metric", r.Alert)
			for _, name := range found {
				require.True(t, known(names, name), "alert %s queries %s, which warren does not export", r.Alert, name)
			}
		}
	}
}
