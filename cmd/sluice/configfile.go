package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/yamlfile"
)

// readConfigFile decodes the YAML config file at path into file, a pointer
// to a struct whose single-value keys are the twins of the command's flags
// (max_wait, --max-wait), and hands the text of each key the file gives to
// its flag, unless that flag was given on the command line (set): so the
// file and the flags accept and refuse the same values, and flags win. It
// returns the file's lines, to place errors about the values afterwards.
func readConfigFile(fs *flag.FlagSet, set map[string]bool, path string, file any) (yamlfile.Lines, error) {
	lines, err := decodeConfigFile(path, file)
	if err != nil {
		return nil, err
	}
	v := reflect.ValueOf(file).Elem()
	for i := range v.NumField() {
		key := v.Type().Field(i).Tag.Get("yaml")
		name := strings.ReplaceAll(key, "_", "-")
		text, single := v.Field(i).Interface().(string)
		if _, given := lines[key]; !given || !single || set[name] || fs.Lookup(name) == nil {
			continue // not given, not a flag's twin (source_db), or given as a flag
		}
		if err := fs.Set(name, text); err != nil {
			return nil, fmt.Errorf("--config %s: %w", path, &yamlfile.Error{Path: key, Line: lines[key], Err: fmt.Errorf("invalid value %q: %w", text, err)})
		}
	}
	return lines, nil
}

// decodeConfigFile reads the config file at path, a regular file of at
// most yamlfile.MaxFileBytes, and decodes it into file. Its errors start
// with --config and the path.
func decodeConfigFile(path string, file any) (yamlfile.Lines, error) {
	data, err := yamlfile.ReadFile(path, yamlfile.MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err) // the error names the path
	}
	lines, err := yamlfile.Decode(data, file)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	return lines, nil
}

// loadConfig reads the config file at path (none when empty) into file as
// readConfigFile does, after the command line was parsed, and returns the
// flags given on the command line and what refuses a bad value by where it
// was given (configRefusal).
func loadConfig(fs *flag.FlagSet, path string, file any) (set map[string]bool, refuse func(path string, err error) error, err error) {
	set = cli.Given(fs)
	var lines yamlfile.Lines
	if path != "" {
		if lines, err = readConfigFile(fs, set, path, file); err != nil {
			return nil, nil, err
		}
	}
	return set, configRefusal(path, set, lines), nil
}

// configRefusal returns what names a bad value by where it was given: the
// flag, or the config file's key and line. path is the file's (flows[1])
// or a flag's name (max-wait).
func configRefusal(configFile string, set map[string]bool, lines yamlfile.Lines) func(path string, err error) error {
	return func(path string, err error) error {
		key := strings.ReplaceAll(path, "-", "_")
		if _, inFile := lines[key]; set[path] || !inFile {
			return fmt.Errorf("--%s: %w", path, err)
		}
		return fmt.Errorf("--config %s: %w", configFile, &yamlfile.Error{Path: key, Line: lines.Line(key), Err: err})
	}
}

// logFlags are the log settings of a long-running command.
type logFlags struct{ level, format string }

func addLogFlags(fs *flag.FlagSet) *logFlags {
	l := &logFlags{}
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error (logs go to stderr)")
	fs.StringVar(&l.format, "log-format", "auto", "log format: text, json, or auto (text on a terminal, JSON lines otherwise)")
	return l
}

// durationText writes a duration as Go writes it ("2m0.1s"): the JSON
// handler would write it as a bare count of nanoseconds, which reads as no
// unit at all. The text handler already writes it so.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// logger returns the logger the flags ask for, writing to w; auto is text
// when w is a terminal, JSON lines otherwise (a file, a pipe, a collector).
// refuse names a bad value by its flag.
func (l *logFlags) logger(w io.Writer, refuse func(flag string, err error) error) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(l.level)); err != nil {
		return nil, refuse("log-level", fmt.Errorf("%q: want debug, info, warn or error", l.level))
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: durationText}
	switch l.format {
	case "auto":
		if cli.IsTerminal(w) {
			return slog.New(slog.NewTextHandler(w, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, refuse("log-format", fmt.Errorf("%q: want auto, text or json", l.format))
}
