package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/run"
)

// A function of two steps: the second fails once with a retry-after, the
// first is not run again when the second is retried.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "sluice-example")
	defer os.RemoveAll(dir)
	app, err := sluice.New(ctx, sluice.Config{DatabaseURL: filepath.Join(dir, "sluice.db"), PollInterval: 20 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer app.Stop(ctx)

	type signup struct{ Email string }
	fetched, tries := 0, 0
	err = sluice.Register(app, run.Function{ID: "welcome", Event: "user/signup"},
		func(ctx *sluice.Context, ev sluice.Event[signup]) (string, error) {
			name, err := sluice.Step(ctx, "look-up", func(context.Context) (string, error) {
				fetched++
				return "Ada", nil
			})
			if err != nil {
				return "", err
			}
			return sluice.Step(ctx, "send-mail", func(context.Context) (string, error) {
				if tries++; tries == 1 {
					return "", sluice.RetryAfter(errors.New("mail server busy"), 10*time.Millisecond)
				}
				return "sent to " + name + " <" + ev.Data.Email + ">", nil
			})
		})
	if err != nil {
		log.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		log.Fatal(err)
	}
	sent, err := app.Send(ctx, "user/signup", "signup-1", signup{Email: "ada@example.com"})
	if err != nil {
		log.Fatal(err)
	}
	out, err := sluice.Result[string](ctx, app, sent[0].RunID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out+";", "look-up ran", fetched, "time(s), send-mail", tries)
	// Output: sent to Ada <ada@example.com>; look-up ran 1 time(s), send-mail 2
}
