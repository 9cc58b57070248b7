package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"
)

// flagSet is a command's flags, each with where its value comes from. A
// setting is taken, first to last, from the command line, its
// environment variable(s), the config file (--config or WARREN_CONFIG:
// "name value" lines, read by ff's PlainParser), and its default. Flags
// marked local (--json, --limit, ...) concern one invocation and are read
// from the command line only.
type flagSet struct {
	*flag.FlagSet
	env *environment
	// positional names the positional arguments in the usage line, such
	// as "ID".
	positional string
	summary    string
	envNames   map[string][]string
	// envFuncs derive a flag's value from the environment when its own
	// variables are not set; they return the value and the variable used.
	envFuncs map[string]func(getenv func(string) string) (value, from string)
	local    map[string]bool
	secret   map[string]bool
	// source is where each flag's value came from, once parsed: "--name",
	// a variable's name, or "name in config file FILE".
	source  map[string]string
	setting string // the source of the Set calls in progress
	setErr  error  // the last failed Set, worded for a user
}

// newFlagSet returns a command's flag set with the flags every command
// has: --config, --log-format and --log-level.
func newFlagSet(name, summary string, env *environment) *flagSet {
	fs := &flagSet{
		FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), env: env, summary: summary,
		envNames: map[string][]string{}, envFuncs: map[string]func(func(string) string) (string, string){},
		local: map[string]bool{}, secret: map[string]bool{}, source: map[string]string{},
	}
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.String("config", "", "read settings from `FILE`: one \"flag-name value\" per line, # comments; flags and variables win over it")
	fs.String("log-format", "text", "log lines as text (key=value) or json")
	fs.String("log-level", "info", "the least level logged: debug, info, warn or error")
	return fs
}

// envVar names the environment variables of flag name, tried in order,
// instead of WARREN_NAME.
func (fs *flagSet) envVar(name string, vars ...string) { fs.envNames[name] = vars }

// localFlags marks flags that are read from the command line only.
func (fs *flagSet) localFlags(names ...string) {
	for _, n := range names {
		fs.local[n] = true
	}
}

// secretFlags marks flags whose value is never shown, not even their
// default.
func (fs *flagSet) secretFlags(names ...string) {
	for _, n := range names {
		fs.secret[n] = true
	}
}

// vars returns the environment variables of flag name.
func (fs *flagSet) vars(name string) []string {
	if fs.local[name] {
		return nil
	}
	if v, ok := fs.envNames[name]; ok {
		return v
	}
	return []string{"WARREN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

// from names where flag name's value came from, for error messages:
// "--name" when it was not set elsewhere.
func (fs *flagSet) from(name string) string {
	if s, ok := fs.source[name]; ok {
		return s
	}
	return "--" + name
}

// tracked records who set a flag.
type tracked struct {
	flag.Value
	name string
	fs   *flagSet
}

func (t *tracked) Set(s string) error {
	if err := t.Value.Set(s); err != nil {
		t.fs.setErr = valueError(t.Value, s, err)
		return t.fs.setErr
	}
	src := t.fs.setting
	if src == "" {
		src = "--" + t.name
	}
	t.fs.source[t.name] = src
	return nil
}

func (t *tracked) IsBoolFlag() bool {
	b, ok := t.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// valueError words the error of a value that does not parse, without the
// strconv jargon.
func valueError(v flag.Value, s string, err error) error {
	g, ok := v.(flag.Getter)
	if !ok {
		return err
	}
	switch g.Get().(type) {
	case int, int64, uint, uint64:
		return fmt.Errorf("%q is not a whole number", s)
	case float64:
		return fmt.Errorf("%q is not a number", s)
	case bool:
		return fmt.Errorf("%q is not a boolean (1 or 0, true or false)", s)
	case time.Duration:
		return fmt.Errorf("%q is not a duration (like 500ms, 30s, 2m)", s)
	}
	return err
}

// parseAll parses args, which may mix flags and positional arguments, then
// the environment and the config file, and returns the positional
// arguments. -h and --help print the help on stdout and return
// flag.ErrHelp; a bad flag prints one line on stderr and returns
// errUsage.
func (fs *flagSet) parseAll(args []string) ([]string, error) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(*tracked); !ok {
			f.Value = &tracked{Value: f.Value, name: f.Name, fs: fs}
		}
	})
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.printHelp(fs.env.stdout)
				return nil, err
			}
			msg := err.Error()
			if fs.setErr != nil {
				msg = fs.setErr.Error()
				// The flag package names the flag after the value: name it first.
				if i := strings.Index(err.Error(), "for flag -"); i >= 0 {
					name, _, _ := strings.Cut(err.Error()[i+len("for flag -"):], ":")
					msg = "--" + name + ": " + msg
				}
			}
			msg = strings.Replace(msg, "flag provided but not defined: -", "unknown flag --", 1)
			fmt.Fprintf(fs.env.stderr, "warren %s: %s (see \"warren %s --help\")\n", fs.Name(), msg, fs.Name())
			return nil, errUsage
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if err := fs.applyEnv(); err != nil {
		return nil, err
	}
	if err := fs.applyConfig(); err != nil {
		return nil, err
	}
	return positional, nil
}

// applyEnv sets each flag not given on the command line from its
// environment variables.
func (fs *flagSet) applyEnv() error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if _, set := fs.source[f.Name]; set || err != nil {
			return
		}
		value, from := "", ""
		for _, name := range fs.vars(f.Name) {
			if v := fs.env.getenv(name); v != "" {
				value, from = v, name
				break
			}
		}
		if from == "" && fs.envFuncs[f.Name] != nil {
			value, from = fs.envFuncs[f.Name](fs.env.getenv)
		}
		if from == "" {
			return
		}
		fs.setting = from
		defer func() { fs.setting = "" }()
		if e := fs.Set(f.Name, value); e != nil {
			err = usageErrorf("%s: %v", from, fs.setErr)
		}
	})
	return err
}

// knownSettings returns the flag names of every command, set by init: a
// name in a config file that no command has is a mistake worth naming.
var knownSettings func() map[string]bool

// envSource names the variable flag name would be set from, or "".
func (fs *flagSet) envSource(name string) string {
	for _, v := range fs.vars(name) {
		if fs.env.getenv(v) != "" {
			return v
		}
	}
	if f := fs.envFuncs[name]; f != nil && !fs.local[name] {
		_, from := f(fs.env.getenv)
		return from
	}
	return ""
}

// applyConfig sets each flag still unset from the config file, when
// there is one. Names the command does not have are skipped: one file
// serves every command.
func (fs *flagSet) applyConfig() error {
	path := fs.Lookup("config").Value.String()
	if path == "" {
		return nil
	}
	where := fs.from("config")
	defer func() { fs.setting = "" }()
	parser := func(r io.Reader, set func(name, value string) error) error {
		return parseConfigLines(r, func(line int, name, value string) error {
			if fs.Lookup(name) == nil && knownSettings != nil && !knownSettings()[name] {
				// Not the name: a line that is not a setting may be a
				// pasted secret, and errors end up in logs.
				return usageErrorf("config file %s (%s): line %d is not a setting of any command (the line is not shown: it may hold a secret)", path, where, line)
			}
			if fs.local[name] || name == "config" {
				return usageErrorf("config file %s (%s): %s cannot be set in a config file, only on the command line", path, where, name)
			}
			if fs.Lookup(name) != nil {
				fs.setting = fmt.Sprintf("%s in config file %s", name, path)
			}
			if err := set(name, value); err != nil {
				return usageErrorf("config file %s (%s): %s: %v", path, where, name, fs.setErr)
			}
			return nil
		})
	}
	err := ff.Parse(fs.FlagSet, []string{}, ff.WithConfigFile(path), ff.WithConfigFileParser(parser), ff.WithIgnoreUndefined(true))
	var ue *usageError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ue):
		return err
	default:
		return usageErrorf("%s: %v", where, err)
	}
}

// printHelp writes the command's usage, summary and flags, each flag with
// its variables and, when set, the variable its value comes from: never
// the value itself, which may be a secret.
func (fs *flagSet) printHelp(w io.Writer) {
	use := "warren " + fs.Name()
	if fs.positional != "" {
		use += " " + fs.positional
	}
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n\nFlags:\n", use, fs.summary)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	for _, name := range names {
		f := *fs.Lookup(name)
		if t, ok := f.Value.(*tracked); ok {
			f.Value = t.Value // UnquoteUsage names the value by its type
		}
		typ, usage := flag.UnquoteUsage(&f)
		line := "  --" + name
		if typ != "" {
			line += " " + typ
		}
		var notes []string
		if vars := fs.vars(name); len(vars) > 0 {
			notes = append(notes, "env "+strings.Join(vars, ", else "))
		}
		switch d := f.DefValue; {
		case d == "" || d == "0" || d == "false" || d == "0s":
		case fs.secret[name] && strings.Contains(d, "://"):
			notes = append(notes, "default "+redactURL(d))
		case !fs.secret[name]:
			notes = append(notes, "default "+d)
		}
		if from := fs.envSource(name); from != "" {
			notes = append(notes, "set from "+from)
		}
		if len(notes) > 0 {
			usage += " (" + strings.Join(notes, "; ") + ")"
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, strings.ReplaceAll(usage, "\n", "\n      "))
	}
	fmt.Fprintln(w, "\nA flag wins over its environment variable, which wins over the config file, which wins over the default.")
}

// usageError is a bad command line, variable or config file value: exit
// status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usageErrorf returns a usageError.
func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}
