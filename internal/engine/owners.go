package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// ownerReads reads the owner tokens of runs as they begin (see ownerOf).
// DBOS starts the runs of one poll of a queue together, and a read of its
// own for each would add a statement to every run, waiting for a
// connection beside the run's steps; instead, the reads asked for while
// one is under way go together in the next, one statement for them all.
// A read asked for while none is under way goes at once.
type ownerReads struct {
	// read returns the owner token of each of ids that has one.
	read func(ctx context.Context, ids []string) (map[string]string, error)

	mu      sync.Mutex
	waiting []ownerRead
	reading bool // a goroutine is reading; it takes what waits
}

type ownerRead struct {
	id    string
	reply chan ownerReply
}

type ownerReply struct {
	owner *string // nil: the run has no owner recorded
	err   error
}

// maxOwnerReads bounds the runs one statement reads.
const maxOwnerReads = 500

// get reads run id's owner token, with the reads asked for at the same
// time.
func (o *ownerReads) get(id string) (*string, error) {
	r := ownerRead{id: id, reply: make(chan ownerReply, 1)}
	o.mu.Lock()
	o.waiting = append(o.waiting, r)
	start := !o.reading
	o.reading = true
	o.mu.Unlock()
	if start {
		go o.serve()
	}
	a := <-r.reply
	return a.owner, a.err
}

// serve reads for the runs waiting, as many at a time as maxOwnerReads,
// until none waits.
func (o *ownerReads) serve() {
	for {
		o.mu.Lock()
		n := min(len(o.waiting), maxOwnerReads)
		if n == 0 {
			o.reading = false
			o.mu.Unlock()
			return
		}
		batch := make([]ownerRead, n)
		copy(batch, o.waiting)
		o.waiting = append(o.waiting[:0], o.waiting[n:]...)
		o.mu.Unlock()
		ids := make([]string, n)
		for i, r := range batch {
			ids[i] = r.id
		}
		owners, err := o.read(context.Background(), ids)
		for _, r := range batch {
			a := ownerReply{err: err}
			if t, ok := owners[r.id]; ok && err == nil {
				a.owner = &t
			}
			r.reply <- a
		}
	}
}

// readOwners reads the owner tokens of runs ids from DBOS's table of runs,
// in one statement.
func (e *Engine) readOwners(ctx context.Context, ids []string) (map[string]string, error) {
	d := e.sys.Dialect()
	var in string
	var arg any
	if d.SupportsArrayParameters() {
		in, arg = "= ANY($1)", ids
	} else {
		b, err := json.Marshal(ids)
		if err != nil {
			return nil, err
		}
		in, arg = "IN (SELECT value FROM json_each($1))", string(b)
	}
	q := e.sys.RenderSQL(`SELECT workflow_uuid, owner_xid FROM %sworkflow_status WHERE workflow_uuid `+in+` AND owner_xid IS NOT NULL`,
		d.SchemaPrefix(e.sys.Schema()))
	rows, err := e.sys.Pool().Query(ctx, q, arg)
	if err != nil {
		return nil, fmt.Errorf("read the owners of %d runs: %w", len(ids), err)
	}
	defer rows.Close()
	owners := make(map[string]string, len(ids))
	for rows.Next() {
		var id, owner string
		if err := rows.Scan(&id, &owner); err != nil {
			return nil, fmt.Errorf("read the owners of %d runs: %w", len(ids), err)
		}
		owners[id] = owner
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the owners of %d runs: %w", len(ids), err)
	}
	return owners, nil
}
