package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
)

func init() {
	register(&cli.Command{
		Name:    "send",
		Summary: "send an event to a running \"sluice serve\"",
		Run:     runSend,
	})
}

func runSend(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "send", "NAME [flags]",
		"Posts the event NAME to POST /v1/events of a running \"sluice serve\" and prints the runs it\nstarted (or found, when the event ID was sent before).")
	data := fs.String("data", "{}", "the event's data, a JSON object")
	id := fs.String("id", "", "event ID; sending the same ID again starts nothing new (default: a random one)")
	url := fs.String("url", "http://127.0.0.1:8288", "base URL of the sluice API")
	tokenEnv := fs.String("token-env", "SLUICE_API_TOKEN", "environment variable holding the API's bearer token")
	if len(args) == 0 || args[0] == "" || args[0][0] == '-' {
		if err := cli.ParseFlags(fs, env, args); err != nil {
			return err
		}
		fmt.Fprintln(env.Stderr, "sluice send: missing the event NAME")
		return cli.ErrUsage
	}
	name := args[0]
	if err := cli.ParseFlags(fs, env, args[1:]); err != nil {
		return err
	}
	if !json.Valid([]byte(*data)) || bytes.TrimSpace([]byte(*data))[0] != '{' {
		return fmt.Errorf("--data %q is not a JSON object", *data)
	}
	body, _ := json.Marshal(map[string]any{"name": name, "id": *id, "data": json.RawMessage(*data)})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, *url+"/v1/events", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("--url %q: %w", *url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok := env.Getenv(*tokenEnv); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("send %s: %w", name, cli.Unreachable(err, *url))
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusAccepted {
		var e struct{ Error string }
		if json.Unmarshal(out, &e) == nil && e.Error != "" {
			return fmt.Errorf("send %s: %s (HTTP %d)", name, e.Error, resp.StatusCode)
		}
		return fmt.Errorf("send %s: HTTP %d", name, resp.StatusCode)
	}
	// The API answers compact JSON; a person reads it here.
	var pretty bytes.Buffer
	if json.Indent(&pretty, out, "", "  ") == nil {
		out = pretty.Bytes()
	}
	_, err = env.Stdout.Write(out)
	return err
}
