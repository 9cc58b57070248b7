package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeGo writes a go command for build.sh: `list -deps` names ten
// packages, `build -v -o OUT` names them as it "compiles" them and
// creates OUT, or, with fail, prints a compile error and exits 1.
func fakeGo(t *testing.T, fail bool) string {
	t.Helper()
	body := `case "$1" in
list) for i in 1 2 3 4 5 6 7 8 9 10; do echo example.com/p$i; done ;;
build)
	for i in 1 2 3 4 5 6 7 8 9 10; do echo example.com/p$i >&2; done
	if [ "$FAIL" = 1 ]; then echo '# example.com/p10' >&2; echo 'p10/x.go:3:1: syntax error' >&2; exit 1; fi
	: > "$4" ;;
esac`
	path := filepath.Join(t.TempDir(), "go")
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\nFAIL="+map[bool]string{true: "1", false: "0"}[fail]+"\n"+body+"\n"), 0o755))
	return path
}

// TestBuildShowsProgress: build.sh says how many packages it builds,
// reports progress as go build compiles them, and says when it is done.
func TestBuildShowsProgress(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "warren")
	cmd := exec.Command("bash", "build.sh", out)
	cmd.Env = append(os.Environ(), "GO="+fakeGo(t, false))
	got, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", got)
	require.FileExists(t, out)
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	require.Contains(t, lines[0], "building "+out+": 10 packages; the first build compiles them all")
	require.Contains(t, string(got), "  compiled 1 of at most 10 packages")
	require.Contains(t, string(got), "  compiled 10 of at most 10 packages")
	require.Contains(t, lines[len(lines)-1], "built "+out+" in ")
}

// TestBuildPassesOnACompileError: a failed build exits non-zero with the
// compiler's lines as they are, and does not say it built.
func TestBuildPassesOnACompileError(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "warren")
	cmd := exec.Command("bash", "build.sh", out)
	cmd.Env = append(os.Environ(), "GO="+fakeGo(t, true))
	got, err := cmd.CombinedOutput()
	require.Error(t, err, "%s", got)
	require.Contains(t, string(got), "# example.com/p10\np10/x.go:3:1: syntax error\n")
	require.NotContains(t, string(got), "built ")
	require.NoFileExists(t, out)
}
