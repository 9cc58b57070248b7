// Package scripts_test checks the decisions of services.sh, the script
// behind `make demo`, `make test` and .ci/run, on a PATH of fakes: no real
// service is installed, started or stopped. CI exercises the real paths
// (.ci/run stops RabbitMQ, then runs `make demo`).
package scripts_test

import (
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// bundle is one run's fake machine: a PATH holding only the fakes and the
// few real tools the script needs, a log the fakes append their command
// lines to, and a port nothing listens on until a fake starts "RabbitMQ".
type bundle struct {
	bin, log string
	port     int
}

func setup(t *testing.T) *bundle {
	t.Helper()
	dir := t.TempDir()
	b := &bundle{bin: filepath.Join(dir, "bin"), log: filepath.Join(dir, "calls.log")}
	require.NoError(t, os.Mkdir(b.bin, 0o755))
	for _, tool := range []string{"sleep", "env", "cp"} {
		p, err := exec.LookPath(tool)
		require.NoError(t, err)
		require.NoError(t, os.Symlink(p, filepath.Join(b.bin, tool)))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b.port = l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return b
}

// fake writes an executable sh script named name into the fake PATH that
// logs its command line, then runs body.
func (b *bundle) fake(t *testing.T, name, body string) {
	t.Helper()
	script := "#!/bin/sh\necho \"" + name + " $*\" >>" + b.log + "\n" + body + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(b.bin, name), []byte(script), 0o755))
}

// startsRabbitMQ returns a fake rabbitmq-server body that "starts" the
// broker: it tells the test through a FIFO, and the test listens on the
// port. The listener lives until the test ends.
func (b *bundle) startsRabbitMQ(t *testing.T) string {
	t.Helper()
	fifo := filepath.Join(filepath.Dir(b.bin), "started")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	done := make(chan struct{})
	var l net.Listener
	go func() {
		defer close(done)
		f, err := os.Open(fifo) // blocks until the fake opens it
		if err != nil {
			return
		}
		_, _ = io.ReadAll(f)
		_ = f.Close()
		l, _ = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(b.port))
	}()
	t.Cleanup(func() {
		// Unblock the reader if the fake never ran.
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
		<-done
		if l != nil {
			_ = l.Close()
		}
	})
	return "echo started >" + fifo
}

// run runs services.sh with args as user uid on the fake PATH, and
// returns its exit code, standard output and standard error.
func (b *bundle) run(t *testing.T, uid int, wait int, args ...string) (int, string, string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	cmd := exec.Command(bash, append([]string{"services.sh"}, args...)...)
	cmd.Env = []string{
		"PATH=" + b.bin,
		"SERVICES_SBIN=",
		"SERVICES_EUID=" + strconv.Itoa(uid),
		"SERVICES_RABBITMQ_PORT=" + strconv.Itoa(b.port),
		"SERVICES_WAIT=" + strconv.Itoa(wait),
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	if err != nil {
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "services.sh did not run: %s", stderr.String())
		code = exit.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// calls returns the command lines the fakes logged.
func (b *bundle) calls(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(b.log)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(raw)), "\n")
}

// Not installed, no package manager, not root: the exact commands for
// every system, with sudo, and exit 1.
func TestServicesPrintsTheCommandsWhenItMayNotInstall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code, _, stderr := b.run(t, 1000, 1, "ensure", "rabbitmq")
	require.Equal(t, 1, code, stderr)
	for _, want := range []string{
		"RabbitMQ is not installed",
		"sudo apt-get update && sudo apt-get install -y rabbitmq-server",
		"sudo rabbitmq-server -detached",
		"sudo dnf install -y rabbitmq-server && sudo systemctl enable --now rabbitmq-server",
		"brew install rabbitmq && brew services start rabbitmq",
	} {
		require.Contains(t, stderr, want)
	}
	require.Empty(t, b.calls(t))
}

// Not installed, apt-get here but not root and no sudo: the apt-get
// commands only, and apt-get is not run.
func TestServicesPrintsOnlyTheDetectedPackageManager(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake(t, "apt-get", "exit 0")
	code, _, stderr := b.run(t, 1000, 1, "ensure", "rabbitmq")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "sudo apt-get update && sudo apt-get install -y rabbitmq-server")
	require.NotContains(t, stderr, "dnf")
	require.NotContains(t, stderr, "brew")
	require.Empty(t, b.calls(t))
}

// Not installed, root, apt-get here: it installs rabbitmq-server, starts
// it, waits for the port and for the node's apps.
func TestServicesInstallsWithAptAndStarts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The fake apt-get "installs" rabbitmq-server and rabbitmqctl: it
	// copies them from pkg into the PATH.
	pkg := b.bin
	b.bin = filepath.Join(filepath.Dir(pkg), "pkg")
	require.NoError(t, os.Mkdir(b.bin, 0o755))
	b.fake(t, "rabbitmq-server", b.startsRabbitMQ(t))
	b.fake(t, "rabbitmqctl", "exit 0")
	b.bin = pkg
	src := filepath.Join(filepath.Dir(pkg), "pkg")
	b.fake(t, "apt-get", `case "$*" in *install*) cp `+src+`/rabbitmq-server `+src+`/rabbitmqctl `+pkg+`;; esac`)
	code, stdout, stderr := b.run(t, 0, 30, "ensure", "rabbitmq")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Equal(t, []string{
		"apt-get update -qq",
		"apt-get install -y -qq --no-install-recommends rabbitmq-server",
		"rabbitmq-server -detached",
		"rabbitmqctl -q await_startup",
	}, b.calls(t))
	require.Contains(t, stdout, "RabbitMQ is answering on 127.0.0.1:"+strconv.Itoa(b.port))
}

// Installed but stopped, root: started with rabbitmq-server -detached, no
// install.
func TestServicesStartsAnInstalledStoppedRabbitMQ(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake(t, "apt-get", "exit 0")
	b.fake(t, "rabbitmq-server", b.startsRabbitMQ(t))
	b.fake(t, "rabbitmqctl", "exit 0")
	code, stdout, stderr := b.run(t, 0, 30, "ensure", "rabbitmq")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	require.Equal(t, []string{"rabbitmq-server -detached", "rabbitmqctl -q await_startup"}, b.calls(t))
}

// Installed but stopped, and the user may not start it: the command to
// run, exit 1, nothing run.
func TestServicesExplainsHowToStartWithoutRoot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake(t, "rabbitmq-server", "exit 0")
	b.fake(t, "rabbitmqctl", "exit 0")
	code, _, stderr := b.run(t, 1000, 1, "ensure", "rabbitmq")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "sudo rabbitmq-server -detached")
	require.Empty(t, b.calls(t))
}

// Started but never answering: exit 1 with a message naming the port.
func TestServicesFailsWhenAStartedRabbitMQNeverAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fake(t, "rabbitmq-server", "exit 0")
	code, _, stderr := b.run(t, 0, 1, "ensure", "rabbitmq")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "not answering on 127.0.0.1:"+strconv.Itoa(b.port))
	require.Equal(t, []string{"rabbitmq-server -detached"}, b.calls(t))
}

// Already answering: nothing is run.
func TestServicesLeavesARunningRabbitMQAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(b.port))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	b.fake(t, "rabbitmq-server", "exit 0")
	code, stdout, stderr := b.run(t, 0, 1, "ensure", "rabbitmq")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "RabbitMQ is answering")
	require.Empty(t, b.calls(t))
}

// A bad command line is a usage error.
func TestServicesUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, args := range [][]string{nil, {"ensure"}, {"start", "rabbitmq"}, {"ensure", "redis"}} {
		code, _, stderr := b.run(t, 0, 1, args...)
		require.Equal(t, 2, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "usage: scripts/services.sh ensure")
	}
}

// The database URL the script prints never shows the password, even one
// with an unencoded @ in it.
func TestServicesHidesTheDatabasePassword(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("services.sh")
	require.NoError(t, err)
	start := strings.Index(string(script), "shown_url() {")
	require.GreaterOrEqual(t, start, 0, "services.sh has no shown_url")
	end := strings.Index(string(script)[start:], "\n}\n")
	require.Positive(t, end)
	fn := string(script)[start : start+end+3]
	for url, want := range map[string]string{
		"postgres://u:secret@db:5432/test?sslmode=disable": "postgres://u:xxxxx@db:5432/test",
		"postgres://u:sec@ret@db/test":                     "postgres://u:xxxxx@db/test",
		"postgres://db/test":                               "postgres://db/test",
	} {
		cmd := exec.Command("bash", "-c", fn+"shown_url")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, want, strings.TrimSpace(string(out)), url)
	}
}
