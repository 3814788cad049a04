package benchcmd

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/llm"
)

// backfillBatch is one plain DBOS workflow's input: its items' keys and
// text.
type backfillBatch struct {
	Keys   []string `json:"keys"`
	Bodies []string `json:"bodies"`
}

// backfillDBOS does the same work the way a DBOS user would without
// sluice: one workflow per batch on a queue, a step that calls the provider
// with the same client and no governor, and a transaction that saves the
// outputs. The queue's worker concurrency is job.Concurrency: a backfill
// that calls an external API is given a bound, as DBOS's own examples of
// queues for API calls do. Its database handle is DBOS's system database,
// the transactions' data source and the app's own, as sluice's is.
func backfillDBOS(ctx context.Context, job backfillJob) (backfillResult, error) {
	var res backfillResult
	client, err := llm.NewClient(llm.Config{BaseURL: job.Provider})
	if err != nil {
		return res, err
	}
	// The pool DBOS would open itself: 20 connections on PostgreSQL; on
	// SQLite, the pragmas, lock mode and connections of DBOS's own.
	src, err := openBenchPool(ctx, dbosSQLite(job.DB), 20)
	if err != nil {
		return res, err
	}
	defer src.close()
	if src.lite != nil {
		src.lite.SetMaxOpenConns(8)
		src.lite.SetMaxIdleConns(4)
	}
	dctx, ds, err := newDBOSOn(ctx, dbos.Config{AppName: "bench-dbos-backfill", Logger: quietLogger(), ApplicationVersion: "bench"}, src)
	if err != nil {
		return res, err
	}
	defer dbos.Shutdown(dctx, 10*time.Second)
	var failure atomic.Pointer[error]
	workflow := func(ctx dbos.Context, b backfillBatch) (int, error) {
		n, err := backfillWorkflow(ctx, client, ds, b)
		if err != nil {
			failure.CompareAndSwap(nil, &err)
		}
		return n, err
	}
	dbos.RegisterWorkflow(dctx, workflow, dbos.WithWorkflowName("bench-backfill"))
	q, err := dbos.RegisterQueue(dctx, "bench-backfill", dbos.WithQueueBasePollingInterval(benchPoll), dbos.WithWorkerConcurrency(job.Concurrency))
	if err != nil {
		return res, err
	}
	if err := dbos.Launch(dctx); err != nil {
		return res, err
	}
	stop, err := startProfile(job)
	if err != nil {
		return res, err
	}
	start := time.Now()
	go func() {
		if err := enqueueBatches(dctx, src, q, workflow, job.Batch); err != nil {
			err = fmt.Errorf("enqueue: %w", err)
			failure.CompareAndSwap(nil, &err)
		}
	}()
	err = waitBackfilled(ctx, src, func(context.Context) error {
		if e := failure.Load(); e != nil {
			return *e
		}
		return nil
	})
	res.Seconds = time.Since(start).Seconds()
	stop()
	return res, err
}

// dbosSQLite is an SQLite path with the pragmas and lock mode DBOS applies
// to the handles it opens itself; a PostgreSQL URL is left as it is.
func dbosSQLite(db string) string {
	if cli.IsPostgresURL(db) {
		return db
	}
	return db + "?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=foreign_keys(ON)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
}

// newDBOSOn starts DBOS on src as its system database, and returns the data
// source its transactions run on: the same handle, so that a transaction
// and its step's record commit as one.
func newDBOSOn(ctx context.Context, cfg dbos.Config, src *benchDB) (dbos.Context, *dbos.DataSource, error) {
	cfg.SystemDBPool, cfg.SQLiteSystemDB = src.pool, src.lite
	dctx, err := dbos.NewContext(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	var ds *dbos.DataSource
	if src.pool != nil {
		ds, err = dbos.NewDataSource(dctx, src.pool)
	} else {
		ds, err = dbos.NewDataSource(dctx, src.lite)
	}
	if err != nil {
		_ = dbos.Shutdown(dctx, time.Second)
		return nil, nil, err
	}
	return dctx, ds, nil
}

// backfillWorkflow calls the provider about one batch in a step and saves
// the outputs in a transaction.
func backfillWorkflow(ctx dbos.Context, client *llm.Client, ds *dbos.DataSource, b backfillBatch) (int, error) {
	outputs, err := dbos.RunAsStep(ctx, func(ctx context.Context) ([]string, error) {
		resp, err := client.Chat(ctx, backfillRequest(b.Bodies))
		if err != nil {
			return nil, err
		}
		return splitReply(resp, len(b.Keys))
	}, dbos.WithStepName("call"), dbos.WithStepMaxRetries(5))
	if err != nil {
		return 0, err
	}
	return dbos.RunAsTransaction(ctx, ds, func(ctx context.Context, tx dbos.Tx) (int, error) {
		for i, k := range b.Keys {
			if _, err := tx.Exec(ctx, backfillSave, outputs[i], k); err != nil {
				return 0, err
			}
		}
		return len(b.Keys), nil
	}, dbos.WithStepName("save"))
}

// enqueueBatches reads the pending items a batch at a time, in key order,
// and enqueues a workflow for each batch, named by its first key.
func enqueueBatches(ctx dbos.Context, db *benchDB, q dbos.Queue, wf dbos.Workflow[backfillBatch, int], batch int) error {
	after := ""
	for {
		var b backfillBatch
		err := db.each(ctx, `SELECT id, body FROM bench_items WHERE output IS NULL AND id > $1 ORDER BY id LIMIT $2`, []any{after, batch},
			func(scan func(...any) error) error {
				var k, body string
				if err := scan(&k, &body); err != nil {
					return err
				}
				b.Keys, b.Bodies = append(b.Keys, k), append(b.Bodies, body)
				return nil
			})
		if err != nil || len(b.Keys) == 0 {
			return err
		}
		if _, err := dbos.RunWorkflow(ctx, wf, b, dbos.WithQueue(q), dbos.WithWorkflowID("backfill-"+b.Keys[0])); err != nil {
			return err
		}
		after = b.Keys[len(b.Keys)-1]
	}
}
