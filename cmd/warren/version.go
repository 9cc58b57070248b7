package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/warrenhq/warren/reduce"
)

// buildVersion is what `warren version` reports, from the binary's build
// information.
type buildVersion struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Time      string `json:"time,omitempty"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
}

// readVersion reads the module version, the VCS revision and the Go
// version from the build information; what is missing (a build without
// VCS stamping) is "unknown", or "(devel)" for the version of a binary
// built in the source tree.
func readVersion() buildVersion {
	v := buildVersion{Version: "unknown", Revision: "unknown", GoVersion: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.GoVersion = info.GoVersion
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func runVersion(_ context.Context, args []string, env *environment) error {
	fs := newFlagSet("version", "Print warren's version, the commit it was built from and the Go version (also: warren --version).", env)
	asJSON := fs.Bool("json", false, `print {"version", "revision", "time", "modified", "go_version"}`)
	fs.localFlags("json")
	if err := parse(fs, args, env); err != nil {
		return err
	}
	v := readVersion()
	if *asJSON {
		return printJSON(env.stdout, v)
	}
	rev := v.Revision
	if v.Modified {
		rev += " (modified)"
	}
	fmt.Fprintf(env.stdout, "warren %s\ncommit %s\n%s\n", v.Version, rev, v.GoVersion)
	return nil
}

func runCompletion(_ context.Context, args []string, env *environment) error {
	fs := newFlagSet("completion", "Print a completion script for bash or zsh. Load it with\n"+
		"  bash: source <(warren completion bash)     (or save it in /etc/bash_completion.d/warren)\n"+
		"  zsh:  source <(warren completion zsh)      (or save it as _warren in a directory of $fpath)", env)
	fs.positional = "bash|zsh"
	positional, err := fs.parseAll(args)
	if err != nil {
		return err
	}
	if len(positional) != 1 || (positional[0] != "bash" && positional[0] != "zsh") {
		return usageErrorf("want bash or zsh (usage: warren completion bash|zsh)")
	}
	flags := commandFlags()
	if positional[0] == "bash" {
		writeBashCompletion(env.stdout, flags)
	} else {
		writeZshCompletion(env.stdout, flags)
	}
	return nil
}

// helpFlag matches a flag line of a command's help.
var helpFlag = regexp.MustCompile(`(?m)^  (--[a-z0-9-]+)`)

// commandFlags returns every command's flags, read from its help, and
// the dlq subcommands' under "dlq list" and so on.
func commandFlags() map[string][]string {
	out := map[string][]string{}
	read := func(name string, args ...string) {
		var stdout bytes.Buffer
		env := &environment{stdin: strings.NewReader(""), stdout: &stdout, stderr: io.Discard, getenv: func(string) string { return "" }}
		for _, c := range commands {
			if c.name == strings.Fields(name)[0] {
				_ = c.run(context.Background(), args, env)
			}
		}
		for _, m := range helpFlag.FindAllStringSubmatch(stdout.String(), -1) {
			out[name] = append(out[name], m[1])
		}
		sort.Strings(out[name])
	}
	for _, c := range commands {
		if c.name == "dlq" {
			for _, sub := range []string{"list", "replay", "purge"} {
				read("dlq "+sub, sub, "--help")
			}
			continue
		}
		read(c.name, "--help")
	}
	return out
}

func init() {
	// Once: it runs every command's --help, and a config file asks for
	// each name its command does not have.
	knownSettings = sync.OnceValue(func() map[string]bool {
		known := map[string]bool{}
		for _, flags := range commandFlags() {
			for _, f := range flags {
				known[strings.TrimPrefix(f, "--")] = true
			}
		}
		return known
	})
}

func commandNames() []string {
	names := make([]string, 0, len(commands)+1)
	for _, c := range commands {
		names = append(names, c.name)
	}
	return append(names, "help")
}

// idCommands are the commands whose argument is a job id: completion
// offers the ids of the server's newest jobs.
var idCommands = []string{"status", "tasks", "task", "watch", "result", "cancel", "pause", "resume", "redrive", "delete"}

// completionIDs is the shell command that lists job ids for completion:
// the newest 100, quietly nothing when the server cannot be reached
// within 3 s. "$@" are the --server and --token words of the line.
const completionIDs = `list -q --limit 100 "$@" 2>/dev/null`

// writeEnumCases writes a shell case arm per flag of enumValues, at
// indent (nested ones step further in): one that offers the flag's
// values with complete when every command takes the same, else a case
// on cmd, the command's word, with an arm per command.
func writeEnumCases(w io.Writer, indent, step, cmd string, complete func(values string) string) {
	enums := enumValues()
	for _, f := range slices.Sorted(maps.Keys(enums)) {
		byCmd := enums[f]
		if all, ok := byCmd[""]; ok {
			fmt.Fprintf(w, "%s%s) %s; return ;;\n", indent, f, complete(all))
			continue
		}
		fmt.Fprintf(w, "%s%s)\n%s%scase %s in\n", indent, f, indent, step, cmd)
		for _, c := range slices.Sorted(maps.Keys(byCmd)) {
			fmt.Fprintf(w, "%s%s%s%s) %s; return ;;\n", indent, step, step, c, complete(byCmd[c]))
		}
		fmt.Fprintf(w, "%s%sesac ;;\n", indent, step)
	}
}

// enumValues are the values completion offers after a flag, by flag and
// then by command ("" for every command).
func enumValues() map[string]map[string]string {
	return map[string]map[string]string{
		"--state": {
			"list":  strings.Join(jobStates, " "),
			"tasks": strings.Join(taskStates, " "),
		},
		"--log-format": {"": "text json"},
		"--log-level":  {"": "debug info warn error"},
		"--reduce":     {"submit": strings.Join(reduce.NewRegistry().Names(), " ")},
	}
}

// jobStates and taskStates are the values of list's and tasks' --state.
var (
	jobStates  = []string{"pending", "running", "completed", "failed", "cancelled"}
	taskStates = []string{"pending", "queued", "completed", "failed", "cancelled"}
)

func writeBashCompletion(w io.Writer, flags map[string][]string) {
	fmt.Fprintf(w, `# bash completion for warren; generated by "warren completion bash".
_warren_ids() {
    # Job ids from the server: the newest 100, nothing if it does not answer.
    if command -v timeout >/dev/null 2>&1; then
        timeout 3 "$_warren_bin" %[2]s
    else
        "$_warren_bin" %[2]s
    fi
}
_warren() {
    local cur prev cmd sub words i w conn
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    _warren_bin="${COMP_WORDS[0]}"
    cmd="" sub="" conn=()
    # The command is the first word that names one: flags may come before it.
    for (( i=1; i < COMP_CWORD; i++ )); do
        w="${COMP_WORDS[i]}"
        case "$w" in
            --server|--token) conn+=("$w" "${COMP_WORDS[i+1]}") ;;
            --server=*|--token=*) conn+=("$w") ;;
        esac
        if [ -z "$cmd" ]; then
            case " %[1]s " in *" $w "*) cmd="$w"; sub="${COMP_WORDS[i+1]}" ;; esac
        fi
    done
    case "$prev" in
`, strings.Join(commandNames(), " "), completionIDs)
	writeEnumCases(w, "        ", "    ", `"$cmd"`, func(values string) string {
		return fmt.Sprintf(`COMPREPLY=( $(compgen -W %q -- "$cur") )`, values)
	})
	fmt.Fprintf(w, `    esac
    if [ -z "$cmd" ]; then
        case "$cur" in
            -*) COMPREPLY=( $(compgen -W "--help --version --server --token --json" -- "$cur") ) ;;
            *) COMPREPLY=( $(compgen -W %q -- "$cur") ) ;;
        esac
        return
    fi
    case "$cmd" in
`, strings.Join(commandNames(), " "))
	var keys []string
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, "dlq ") {
			continue
		}
		words := strings.Join(flags[k], " ")
		switch k {
		case "help":
		case "completion":
			words = "bash zsh"
		}
		fmt.Fprintf(w, "        %s) words=%q ;;\n", k, words)
	}
	fmt.Fprintf(w, `        help) words=%[1]q ;;
        dlq)
            case "$sub" in
                list) words=%[2]q ;;
                replay) words=%[3]q ;;
                purge) words=%[4]q ;;
                *) words="list replay purge" ;;
            esac ;;
        *) words="" ;;
    esac
    case "$cur" in
        -*) ;;
        *)
            case " %[5]s " in
                *" $cmd "*) COMPREPLY=( $(compgen -W "$(_warren_ids "${conn[@]}")" -- "$cur") ); return ;;
            esac
            [ -z "$cur" ] || [ "$cmd" = completion ] || [ "$cmd" = help ] || [ "$cmd" = dlq ] || { COMPREPLY=( $(compgen -f -- "$cur") ); return; } ;;
    esac
    COMPREPLY=( $(compgen -W "$words" -- "$cur") )
}
complete -o default -F _warren warren
`, strings.Join(commandNames(), " "), strings.Join(flags["dlq list"], " "), strings.Join(flags["dlq replay"], " "), strings.Join(flags["dlq purge"], " "), strings.Join(idCommands, " "))
}

func writeZshCompletion(w io.Writer, flags map[string][]string) {
	fmt.Fprintln(w, `#compdef warren
# zsh completion for warren; generated by "warren completion zsh".
_warren() {
  local -a cmds
  if (( CURRENT == 2 )); then`)
	fmt.Fprint(w, "    cmds=(")
	for _, c := range commands {
		fmt.Fprintf(w, "\n      %q", c.name+":"+strings.ReplaceAll(c.summary, ":", `\:`))
	}
	fmt.Fprintln(w, "\n      'help:show the help of a command'\n    )\n    _describe 'command' cmds\n    return\n  fi")
	fmt.Fprintln(w, "  case ${words[CURRENT-1]} in")
	writeEnumCases(w, "    ", "  ", "${words[2]}", func(values string) string { return "compadd -- " + values })
	fmt.Fprintln(w, "  esac\n  case ${words[2]} in")
	var keys []string
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if strings.HasPrefix(k, "dlq ") {
			continue
		}
		switch k {
		case "completion":
			fmt.Fprintln(w, "    completion) _values 'shell' bash zsh ;;")
		case "status", "tasks", "task", "watch", "result", "cancel", "pause", "resume", "redrive", "delete":
			// Job ids from the server, quietly none when it does not answer.
			fmt.Fprintf(w, "    %s) compadd -- %s; compadd -- ${(f)\"$(${words[1]} %s)\"} ;;\n", k, strings.Join(flags[k], " "), strings.Replace(completionIDs, ` "$@"`, "", 1))
		default:
			fmt.Fprintf(w, "    %s) compadd -- %s; _files ;;\n", k, strings.Join(flags[k], " "))
		}
	}
	fmt.Fprintf(w, "    help) _values 'command' %s ;;\n", strings.Join(commandNames(), " "))
	fmt.Fprintf(w, `    dlq)
      if (( CURRENT == 3 )); then
        _values 'subcommand' list replay purge
      else
        case ${words[3]} in
          list) compadd -- %s ;;
          replay) compadd -- %s ;;
          purge) compadd -- %s ;;
        esac
      fi ;;
  esac
}
compdef _warren warren
`, strings.Join(flags["dlq list"], " "), strings.Join(flags["dlq replay"], " "), strings.Join(flags["dlq purge"], " "))
}
