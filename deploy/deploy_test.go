// Package deploy_test checks the deployment files against the code: the
// Dockerfile and .dockerignore, deploy/compose and deploy/systemd. Every
// warren subcommand and flag they use must exist (asked of the binary,
// built from the context .dockerignore leaves, with `warren CMD --help`),
// every WARREN_* variable they set must be one warren reads (its source's
// "WARREN_..." literals and the names its help lists), and every stop
// timeout must outlast the drain it waits for (the packages' defaults).
package deploy_test

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/warrenhq/warren/server"
	"github.com/warrenhq/warren/worker"
)

// root is the repository, from this package's directory.
const root = ".."

// binary is warren built once for every test of the package: from a copy
// of the build context .dockerignore leaves, as the Dockerfile builds it
// (static, -trimpath), so a file the image needs but .dockerignore drops
// fails here.
var binary struct {
	once sync.Once
	path string
	err  error
}

func warrenBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "warren-deploy-test-")
		if err != nil {
			binary.err = err
			return
		}
		ctx := filepath.Join(dir, "context")
		if binary.err = copyContext(ctx); binary.err != nil {
			return
		}
		binary.path = filepath.Join(dir, "warren")
		cmd := exec.Command(goTool(), "build", "-trimpath", "-o", binary.path, "./cmd/warren")
		cmd.Dir = ctx
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
		if out, err := cmd.CombinedOutput(); err != nil {
			binary.err = fmt.Errorf("go build ./cmd/warren in the context .dockerignore leaves: %v\n%s", err, out)
		}
	})
	require.NoError(t, binary.err)
	return binary.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary.path != "" {
		_ = os.RemoveAll(filepath.Dir(binary.path))
	}
	os.Exit(code)
}

// goTool is the go command: `go test` puts its own GOROOT/bin first on
// PATH.
func goTool() string { return "go" }

// --- .dockerignore ------------------------------------------------------------

// parseDockerignore returns the patterns of a .dockerignore. Only the
// forms ignored implements are allowed: no exceptions ("!").
func parseDockerignore(raw []byte) ([]string, error) {
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			return nil, fmt.Errorf(".dockerignore: exceptions (%q) are not understood by this test", line)
		}
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(line, "/"), "/"))
	}
	return out, nil
}

func dockerignore(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	require.NoError(t, err)
	patterns, err := parseDockerignore(raw)
	require.NoError(t, err)
	return patterns
}

// ignored says whether the patterns drop rel (slash-separated, from the
// context's root), as Docker reads them: a pattern matches the path or one
// of its parent directories, from the root; "**/" matches any directories.
func ignored(patterns []string, rel string) bool {
	parts := strings.Split(rel, "/")
	for _, p := range patterns {
		if rest, ok := strings.CutPrefix(p, "**/"); ok {
			for _, part := range parts {
				if m, _ := filepath.Match(rest, part); m {
					return true
				}
			}
			continue
		}
		for i := 1; i <= len(parts); i++ {
			if m, _ := filepath.Match(p, strings.Join(parts[:i], "/")); m {
				return true
			}
		}
	}
	return false
}

// copyContext copies the repository into dst, less what .dockerignore
// drops.
func copyContext(dst string) error {
	raw, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		return err
	}
	patterns, err := parseDockerignore(raw)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignored(patterns, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

func TestDockerignoreKeepsWhatTheBuildNeedsAndDropsTheRest(t *testing.T) {
	t.Parallel()
	patterns := dockerignore(t)
	for _, rel := range []string{".git", "bin/warren", "warren", "warren.db", "docs/operations.md", "deploy/compose/compose.yaml", "x/node_modules/y", "go.work", "internal/tests/go.mod"} {
		require.True(t, ignored(patterns, rel), "%s should stay out of the build context", rel)
	}
	for _, rel := range []string{"go.mod", "go.sum", "cmd/warren/main.go", "cmd/warren", "internal/ui/static", "store/sqlite/migrations", "cmd/warren/internal/demo/corpus"} {
		require.False(t, ignored(patterns, rel), "%s is needed by the build", rel)
	}
	// The binary built from that context is the one every test below asks.
	warrenBinary(t)
}

// --- what the code knows --------------------------------------------------------

// help is `warren CMD --help`, run once per command.
var helpCache sync.Map // command -> helpResult

type helpResult struct {
	flags map[string]bool
	vars  map[string]bool
	err   error
}

var (
	// flagLine is a flag at the start of a help line, in the forms of Go's
	// flag package ("  -name type"), pflag/cobra ("  -c, --name type") and
	// others ("  --name=VALUE").
	flagLine = regexp.MustCompile(`^\s+(?:-[A-Za-z0-9],\s+)?--?([a-z][a-z0-9-]*)`)
	varName  = regexp.MustCompile(`WARREN_[A-Z0-9_]+`)
	// varLiteral is a Go string literal that is exactly a variable's name.
	varLiteral = regexp.MustCompile(`"(WARREN_[A-Z0-9_]+)"`)
)

// commandHelp returns the flags and variables `warren cmd --help` lists;
// an unknown command, or help that does not exit 0, is an error.
func commandHelp(t *testing.T, cmd string) helpResult {
	t.Helper()
	if v, ok := helpCache.Load(cmd); ok {
		return v.(helpResult)
	}
	out, err := exec.Command(warrenBinary(t), cmd, "--help").CombinedOutput()
	res := helpResult{flags: map[string]bool{"help": true, "h": true}, vars: map[string]bool{}}
	switch {
	case err != nil:
		res.err = fmt.Errorf("warren %s --help: %v\n%s", cmd, err, out)
	case strings.Contains(string(out), "unknown command"):
		res.err = fmt.Errorf("warren has no command %q:\n%s", cmd, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if m := flagLine.FindStringSubmatch(sc.Text()); m != nil {
			res.flags[m[1]] = true
		}
		for _, v := range varName.FindAllString(sc.Text(), -1) {
			res.vars[v] = true
		}
	}
	helpCache.Store(cmd, res)
	return res
}

// knownVars returns every WARREN_* variable warren reads: the string
// literals naming one in its Go sources (not tests), and the names the
// help of every command lists.
var knownVarsOnce = sync.OnceValues(func() (map[string]bool, error) {
	vars := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || path == filepath.Join(root, "deploy")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range varLiteral.FindAllStringSubmatch(string(src), -1) {
			vars[m[1]] = true
		}
		return nil
	})
	return vars, err
})

func knownVars(t *testing.T) map[string]bool {
	t.Helper()
	vars, err := knownVarsOnce()
	require.NoError(t, err)
	out := map[string]bool{}
	for v := range vars {
		out[v] = true
	}
	for _, cmd := range []string{"server", "worker", "migrate"} {
		for v := range commandHelp(t, cmd).vars {
			out[v] = true
		}
	}
	require.NotEmpty(t, out)
	return out
}

// invocation is one warren command line of a deployment file.
type invocation struct {
	where string   // file and service or line, for messages
	args  []string // after the binary: the command, then its flags
}

// checkInvocation requires the command to exist and every flag it gives
// to be one the command lists.
func checkInvocation(t *testing.T, inv invocation) {
	t.Helper()
	require.NotEmpty(t, inv.args, "%s: no warren command", inv.where)
	h := commandHelp(t, inv.args[0])
	require.NoError(t, h.err, "%s", inv.where)
	for _, a := range inv.args[1:] {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		require.True(t, h.flags[name], "%s: warren %s has no flag --%s (its help lists %v)", inv.where, inv.args[0], name, keys(h.flags))
	}
}

// checkVars requires every WARREN_* name to be one warren reads.
func checkVars(t *testing.T, where string, names []string) {
	t.Helper()
	known := knownVars(t)
	for _, n := range names {
		if strings.HasPrefix(n, "WARREN_") {
			require.True(t, known[n], "%s sets %s, which warren does not read (it reads %v)", where, n, keys(known))
		}
	}
}

// flagValue returns the value of --name in args, if given.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) && strings.HasPrefix(args[i], "-") {
			return args[i+1], true
		}
	}
	return "", false
}

// drain is how long the command may take to stop after SIGTERM: its
// --shutdown-timeout, or the package default.
func drain(t *testing.T, args []string) time.Duration {
	t.Helper()
	if v, ok := flagValue(args, "shutdown-timeout"); ok {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		return d
	}
	switch args[0] {
	case "server":
		return server.DefaultShutdownTimeout
	case "worker":
		return worker.DefaultShutdownTimeout
	}
	return 0
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestHelpParsingSeesTheFlagsAndVariables(t *testing.T) {
	t.Parallel()
	// The test of the deployment files is only as good as its reading of
	// the help: it must see flags and variables that surely exist.
	h := commandHelp(t, "worker")
	require.NoError(t, h.err)
	require.True(t, h.flags["amqp-url"], "flags seen: %v", keys(h.flags))
	require.True(t, h.flags["concurrency"], "flags seen: %v", keys(h.flags))
	require.True(t, knownVars(t)["WARREN_AMQP_URL"])
	require.Error(t, commandHelp(t, "no-such-command").err)
	require.False(t, h.flags["no-such-flag"])
}

// --- Dockerfile -------------------------------------------------------------------

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line      int
	cmd, rest string
}

func dockerfile(t *testing.T) []instruction {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, rest, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{start, strings.ToUpper(cmd), strings.TrimSpace(rest)})
		cur.Reset()
	}
	return out
}

// jsonArray parses an exec-form ["a", "b"] argument list.
func jsonArray(t *testing.T, in instruction) []string {
	t.Helper()
	var out []string
	require.NoError(t, yaml.Unmarshal([]byte(in.rest), &out), "Dockerfile:%d: %s needs the exec form [\"...\"]", in.line, in.cmd)
	return out
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	ins := dockerfile(t)
	var froms []instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			froms = append(froms, in)
		}
	}
	require.GreaterOrEqual(t, len(froms), 2, "a multi-stage build: a Go builder, then the runtime image")

	// The builder's Go is the go.mod's (major.minor).
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	require.NotNil(t, goVersion)
	require.True(t, strings.HasPrefix(froms[0].rest, "golang:"+string(goVersion[1])), "Dockerfile:%d: build with Go %s: %s", froms[0].line, goVersion[1], froms[0].rest)

	// The build: static, -trimpath, the warren command.
	final := froms[len(froms)-1]
	var build, cgoOff bool
	for _, in := range ins {
		if in.line > final.line {
			break
		}
		if strings.Contains(in.rest, "CGO_ENABLED=0") {
			cgoOff = true
		}
		if in.cmd == "RUN" && strings.Contains(in.rest, "go build") {
			require.Contains(t, in.rest, "-trimpath", "Dockerfile:%d", in.line)
			require.Contains(t, in.rest, "./cmd/warren", "Dockerfile:%d", in.line)
			build = true
		}
	}
	require.True(t, build, "no RUN go build in the builder")
	require.True(t, cgoOff, "the binary must be static: CGO_ENABLED=0")
	require.NotContains(t, final.rest, "golang", "the runtime stage must not be the Go toolchain image")

	// The runtime stage: non-root, port 8080, warren as the entry point.
	var user, entry string
	var cmd []string
	var exposed bool
	var envVars []string
	for _, in := range ins {
		if in.line < final.line {
			continue
		}
		switch in.cmd {
		case "USER":
			user = in.rest
		case "EXPOSE":
			exposed = exposed || strings.Contains(" "+in.rest+" ", " 8080 ")
		case "ENTRYPOINT":
			e := jsonArray(t, in)
			require.Len(t, e, 1, "Dockerfile:%d: ENTRYPOINT is the binary alone; the command goes in CMD or the run's arguments", in.line)
			entry = e[0]
		case "CMD":
			cmd = jsonArray(t, in)
		case "ENV":
			for _, f := range strings.Fields(in.rest) {
				if name, _, ok := strings.Cut(f, "="); ok {
					envVars = append(envVars, name)
				}
			}
		}
	}
	require.NotEmpty(t, user, "the runtime stage needs a USER")
	uid, _, _ := strings.Cut(user, ":")
	require.NotContains(t, []string{"root", "0"}, uid, "the image must not run as root")
	require.True(t, exposed, "EXPOSE 8080")
	require.True(t, strings.HasSuffix(entry, "/warren"), "ENTRYPOINT is warren, got %q", entry)
	require.NotEmpty(t, cmd)
	if cmd[0] == "help" {
		out, err := exec.Command(warrenBinary(t), cmd...).CombinedOutput()
		require.NoError(t, err, "Dockerfile CMD: warren %s:\n%s", strings.Join(cmd, " "), out)
	} else {
		checkInvocation(t, invocation{"Dockerfile CMD", cmd})
	}
	require.NotEmpty(t, envVars)
	checkVars(t, "Dockerfile", envVars)
}

// --- compose ------------------------------------------------------------------------

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string                       `yaml:"image"`
	Build       any                          `yaml:"build"`
	Command     []string                     `yaml:"command"`
	Environment map[string]string            `yaml:"environment"`
	DependsOn   map[string]map[string]string `yaml:"depends_on"`
	Healthcheck map[string]any               `yaml:"healthcheck"`
	Volumes     []string                     `yaml:"volumes"`
	StopSignal  string                       `yaml:"stop_signal"`
	StopGrace   string                       `yaml:"stop_grace_period"`
}

func TestCompose(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "compose", "compose.yaml"))
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(raw, &c), "compose.yaml (environment must be a mapping, command a list)")

	rabbit, ok := c.Services["rabbitmq"]
	require.True(t, ok, "a rabbitmq service")
	require.Regexp(t, `^rabbitmq:(3\.1[0-9]|4\.)`, rabbit.Image, "RabbitMQ 3.10 or newer: warren's quorum queues need it")
	require.NotEmpty(t, rabbit.Healthcheck)
	var conf string
	for _, v := range rabbit.Volumes {
		if src, dst, ok := strings.Cut(v, ":"); ok && strings.HasPrefix(dst, "/etc/rabbitmq/") {
			conf = src
		}
	}
	require.NotEmpty(t, conf, "rabbitmq mounts its rabbitmq.conf")
	checkRabbitConf(t, filepath.Join(root, "deploy", "compose", conf))
	pg, ok := c.Services["postgres"]
	require.True(t, ok, "a postgres service")
	require.NotEmpty(t, pg.Healthcheck)

	counts := map[string]int{}
	metrics := false
	for name, s := range c.Services {
		if s.Build == nil && !strings.HasPrefix(s.Image, "warren") {
			continue
		}
		where := "compose.yaml service " + name
		require.NotEmpty(t, s.Command, "%s: no command", where)
		checkInvocation(t, invocation{where, s.Command})
		vars := make([]string, 0, len(s.Environment))
		for k := range s.Environment {
			vars = append(vars, k)
		}
		checkVars(t, where, vars)
		counts[s.Command[0]]++
		for dep, cond := range s.DependsOn {
			want := "service_healthy"
			if dep == "migrate" {
				want = "service_completed_successfully"
			}
			require.Equal(t, want, cond["condition"], "%s: depends_on %s", where, dep)
		}
		switch s.Command[0] {
		case "server":
			require.True(t, strings.HasPrefix(s.Environment["WARREN_DATABASE_URL"], "postgres://"), "%s: servers share PostgreSQL", where)
			require.Contains(t, s.DependsOn, "postgres", where)
			require.Contains(t, s.DependsOn, "rabbitmq", where)
		case "worker":
			require.Contains(t, s.DependsOn, "rabbitmq", where)
			for v := range s.Environment {
				require.False(t, serverOnly()[v], "%s: a worker gets the server's %s", where, v)
			}
			_, ok := flagValue(s.Command, "metrics-listen")
			metrics = metrics || ok || s.Environment["WARREN_METRICS_LISTEN"] != ""
		}
		if s.Command[0] == "server" || s.Command[0] == "worker" {
			require.Equal(t, "SIGTERM", s.StopSignal, where)
			grace, err := time.ParseDuration(s.StopGrace)
			require.NoError(t, err, "%s: stop_grace_period", where)
			require.Greater(t, grace, drain(t, s.Command), "%s: stop_grace_period must outlast the drain", where)
		}
	}
	require.GreaterOrEqual(t, counts["server"], 2, "two servers")
	require.GreaterOrEqual(t, counts["worker"], 2, "two workers")
	require.True(t, metrics, "one worker serves metrics")

	// The instructions (in compose.yaml and docs/operations.md) keep what
	// they generate in .env, every variable compose.yaml requires included,
	// so that later docker compose commands find it.
	ops, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	require.NoError(t, err)
	for where, text := range map[string]string{"compose.yaml": string(raw), "docs/operations.md": string(ops)} {
		gen := regexp.MustCompile(`(?m)^[# ]*\[ -f \.env \] \|\| \(umask 077 && printf '([^']*)'.*\n.*> \.env\)$`).FindStringSubmatch(text)
		require.NotNil(t, gen, "%s: the command that writes .env", where)
		for _, m := range regexp.MustCompile(`\$\{([A-Z_]+):\?`).FindAllStringSubmatch(string(raw), -1) {
			require.Contains(t, gen[1], m[1]+"=", "%s: .env lacks %s, which compose.yaml requires", where, m[1])
		}
		for _, m := range regexp.MustCompile(`\$\{([A-Z_]+):-`).FindAllStringSubmatch(string(raw), -1) {
			if strings.Contains(m[1], "PASSWORD") {
				require.Contains(t, gen[1], m[1]+"=", "%s: .env lacks a generated %s", where, m[1])
			}
		}
	}
}

// serverOnly are the variables only a server reads: the store's URL (with
// its password), the API tokens, the TLS key... A worker is not given them.
func serverOnly() map[string]bool {
	out := map[string]bool{}
	for _, v := range server.EnvVars() {
		out[v.Name] = true
	}
	for _, v := range worker.EnvVars() {
		delete(out, v.Name)
	}
	return out
}

// checkRabbitConf reads rabbitmq.conf's keys and, where a RabbitMQ is
// installed here, requires each to be in its configuration schema.
func checkRabbitConf(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var confKeys []string
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, _, ok := strings.Cut(line, "=")
		require.True(t, ok, "%s:%d: not key = value", path, i+1)
		confKeys = append(confKeys, strings.TrimSpace(k))
	}
	require.NotEmpty(t, confKeys)
	schemas, _ := filepath.Glob("/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbit-*/priv/schema/rabbit.schema")
	if len(schemas) == 0 {
		t.Log("no RabbitMQ installed here: rabbitmq.conf's keys not checked against its schema")
		return
	}
	schema, err := os.ReadFile(schemas[0])
	require.NoError(t, err)
	for _, k := range confKeys {
		require.True(t, strings.Contains(string(schema), `{mapping, "`+k+`"`), "%s: %s is not a RabbitMQ setting (%s)", path, k, schemas[0])
	}
}

// --- systemd ------------------------------------------------------------------------

// unit is a parsed systemd unit: section -> key -> values in order.
type unit map[string]map[string][]string

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	u := unit{}
	section := ""
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok && section != "", "%s:%d: not Key=value in a section", path, i+1)
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

func (u unit) one(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	require.Len(t, v, 1, "[%s] %s", section, key)
	return v[0]
}

func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(root, "deploy", "systemd")
	for _, tc := range []struct {
		file, command string
		state         bool
	}{
		{"warren-server.service", "server", true},
		{"warren-worker@.service", "worker", false},
	} {
		where := "deploy/systemd/" + tc.file
		u := readUnit(t, filepath.Join(dir, tc.file))
		exec := strings.Fields(u.one(t, "Service", "ExecStart"))
		require.True(t, strings.HasSuffix(exec[0], "/warren"), "%s: ExecStart runs warren", where)
		require.Equal(t, tc.command, exec[1], where)
		checkInvocation(t, invocation{where, exec[1:]})

		var vars []string
		for _, e := range u["Service"]["Environment"] {
			for _, f := range strings.Fields(e) {
				name, _, _ := strings.Cut(strings.Trim(f, `"`), "=")
				vars = append(vars, name)
			}
		}
		checkVars(t, where, vars)
		require.Contains(t, u["Service"]["EnvironmentFile"], "/etc/warren/warren.env", where)

		if u["Service"]["DynamicUser"] == nil {
			require.NotEmpty(t, u["Service"]["User"], "%s: DynamicUser=yes or a User", where)
		} else {
			require.Equal(t, "yes", u.one(t, "Service", "DynamicUser"), where)
		}
		require.Equal(t, "strict", u.one(t, "Service", "ProtectSystem"), where)
		require.Equal(t, "yes", u.one(t, "Service", "NoNewPrivileges"), where)
		require.Equal(t, "on-failure", u.one(t, "Service", "Restart"), where)
		require.Equal(t, "SIGTERM", u.one(t, "Service", "KillSignal"), where)
		stop, err := strconv.Atoi(u.one(t, "Service", "TimeoutStopSec"))
		require.NoError(t, err, "%s: TimeoutStopSec in seconds", where)
		require.Greater(t, time.Duration(stop)*time.Second, drain(t, exec[1:]), "%s: TimeoutStopSec must outlast the drain", where)
		if tc.state {
			require.Equal(t, "warren", u.one(t, "Service", "StateDirectory"), where)
			require.Equal(t, "/var/lib/warren", u.one(t, "Service", "WorkingDirectory"), where)
		}
		require.Equal(t, "multi-user.target", u.one(t, "Install", "WantedBy"), where)
	}

	// The example environment files: every variable, set or commented
	// out; the one every unit reads holds nothing only a server reads,
	// which is the server's own file's.
	all, server := envExample(t, filepath.Join(dir, "warren.env.example")), envExample(t, filepath.Join(dir, "server.env.example"))
	require.GreaterOrEqual(t, len(all), 5)
	for _, v := range all {
		require.False(t, serverOnly()[v], "warren.env.example, which workers read, sets the server's %s", v)
	}
	require.Contains(t, server, "WARREN_API_TOKENS")
	require.Contains(t, server, "WARREN_DATABASE_URL")
	checkVars(t, "deploy/systemd/warren.env.example", all)
	checkVars(t, "deploy/systemd/server.env.example", server)
}

// envExample returns the variables of an example environment file, set
// or commented out, and requires every other line to be a comment.
func envExample(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var vars []string
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if m := regexp.MustCompile(`^#?(WARREN_[A-Z0-9_]+)=`).FindStringSubmatch(line); m != nil {
			vars = append(vars, m[1])
			continue
		}
		require.True(t, line == "" || strings.HasPrefix(line, "#"), "%s:%d: not VARIABLE=value or a comment: %q", path, i+1, line)
	}
	return vars
}

// TestSystemdWorkerUnitsReadNoServerSecret: the worker units, Go's and
// Python's, read the settings every process shares and their instance's,
// never the server's file; the Python unit runs the README's way (the
// system's python3, PYTHONPATH at the checkout's python/) a script that is
// in the repository.
func TestSystemdWorkerUnitsReadNoServerSecret(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(root, "deploy", "systemd")
	server := readUnit(t, filepath.Join(dir, "warren-server.service"))
	require.Contains(t, server["Service"]["EnvironmentFile"], "-/etc/warren/server.env")
	for _, name := range []string{"warren-worker@.service", "warren-python-worker@.service"} {
		u := readUnit(t, filepath.Join(dir, name))
		require.Equal(t, []string{"/etc/warren/warren.env", "-/etc/warren/worker-%i.env"}, u["Service"]["EnvironmentFile"], name)
		for _, e := range u["Service"]["Environment"] {
			name, _, _ := strings.Cut(e, "=")
			require.False(t, serverOnly()[name], "%s sets the server's %s", name, name)
		}
	}

	py := readUnit(t, filepath.Join(dir, "warren-python-worker@.service"))
	exec := strings.Fields(py.one(t, "Service", "ExecStart"))
	require.Equal(t, "/usr/bin/python3", exec[0])
	script, ok := strings.CutPrefix(exec[1], "/opt/warren/")
	require.True(t, ok, "the script of the checkout in /opt/warren: %s", exec[1])
	require.FileExists(t, filepath.Join(root, script))
	require.Contains(t, py["Service"]["Environment"], "PYTHONPATH=/opt/warren/python")
	require.DirExists(t, filepath.Join(root, "python", "warren_worker"))
	require.Equal(t, "yes", py.one(t, "Service", "DynamicUser"))
	require.Equal(t, "strict", py.one(t, "Service", "ProtectSystem"))
	require.Equal(t, "SIGTERM", py.one(t, "Service", "KillSignal"))
	require.Equal(t, "multi-user.target", py.one(t, "Install", "WantedBy"))
}

// systemd-analyze verify, where it is installed (it needs no running
// systemd): no warning about the units, with ExecStart pointed at the
// binary built here (verify requires it to exist).
func TestSystemdAnalyzeVerify(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: the units are checked by TestSystemdUnits only")
		return
	}
	bin := warrenBinary(t)
	dir := t.TempDir()
	repo, err := filepath.Abs(root)
	require.NoError(t, err)
	for _, name := range []string{"warren-server.service", "warren-worker@.service", "warren-python-worker@.service"} {
		raw, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", name))
		require.NoError(t, err)
		out := strings.ReplaceAll(string(raw), "/usr/local/bin/warren", bin)
		out = strings.ReplaceAll(out, "/opt/warren", repo)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(out), 0o644))
	}
	require.NoError(t, os.Symlink("warren-worker@.service", filepath.Join(dir, "warren-worker@1.service")))
	require.NoError(t, os.Symlink("warren-python-worker@.service", filepath.Join(dir, "warren-python-worker@1.service")))
	for _, name := range []string{"warren-server.service", "warren-worker@1.service", "warren-python-worker@1.service"} {
		cmd := exec.Command(analyze, "verify", "--man=no", "./"+name)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) && strings.Contains(string(out), "Failed to") && !strings.Contains(string(out), name) {
			// Not the unit's fault: systemd-analyze cannot work here
			// (no /run/systemd, a sandbox without its mounts).
			t.Logf("systemd-analyze verify cannot run here: %s", out)
			return
		}
		require.NoError(t, err, "systemd-analyze verify %s:\n%s", name, out)
		require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify %s", name)
	}
}
