package demo

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"html/template"
	"time"

	"github.com/sluice-dev/sluice/internal/chart"
)

// The side-by-side page's chart: a point of every job's done count every
// chartStep of simulated time, drawn over at most chartSpan.
const (
	chartStep = 10 * time.Minute
	chartSpan = 7 * 24 * time.Hour
)

// lastPoint is the simulated time of the chart's last point on db; zero
// without one.
func lastPoint(ctx context.Context, db *sql.DB) (time.Time, error) {
	if _, err := db.ExecContext(ctx, demoProgressTable); err != nil {
		return time.Time{}, fmt.Errorf("the demo's progress: %w", err)
	}
	var ms sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT MAX(at_ms) FROM demo_progress`).Scan(&ms); err != nil {
		return time.Time{}, fmt.Errorf("the demo's progress: %w", err)
	}
	if !ms.Valid {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms.Int64), nil
}

// chartPoint is one job's done count at a moment, kept for the chart.
type chartPoint struct {
	at        time.Time
	side, job string
	done      int64
}

// record keeps snap's done counts as a point of the chart, when chartStep
// has passed since the last one. flushPoints writes them: a view only
// reads the database.
func (d *demo) record(snap demoSnapshot) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.point.IsZero() && snap.At.Sub(d.point) < chartStep {
		return
	}
	for _, v := range snap.Sides {
		for _, j := range v.Jobs {
			d.pending = append(d.pending, chartPoint{snap.At, v.Side, j.Name, j.Done})
		}
	}
	d.point = snap.At
}

// flushPoints writes the chart's points kept since the last flush; those
// it cannot write are kept for the next.
func (d *demo) flushPoints(ctx context.Context) error {
	d.mu.Lock()
	points := d.pending
	d.pending = nil
	d.mu.Unlock()
	if len(points) == 0 {
		return nil
	}
	err := func() error {
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		for _, p := range points {
			if _, err := tx.ExecContext(ctx, `INSERT INTO demo_progress (at_ms, side, job, done) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`,
				p.at.UnixMilli(), p.side, p.job, p.done); err != nil {
				return err
			}
		}
		return tx.Commit()
	}()
	if err != nil {
		d.mu.Lock()
		d.pending = append(points, d.pending...)
		d.mu.Unlock()
		return fmt.Errorf("record the demo's progress: %w", err)
	}
	return nil
}

// chart draws each job's done count on both sides since the demo began
// (over the last chartSpan at most), a panel a job; "" before two points.
func (d *demo) chart(ctx context.Context, now time.Time) (template.HTML, error) {
	start := d.first
	if now.Sub(start) > chartSpan {
		start = now.Add(-chartSpan)
	}
	rows, err := d.db.QueryContext(ctx, `SELECT at_ms, side, job, done FROM demo_progress WHERE at_ms >= $1 ORDER BY at_ms`, start.UnixMilli())
	if err != nil {
		return "", fmt.Errorf("read the demo's progress: %w", err)
	}
	defer rows.Close()
	type key struct{ side, job string }
	series := map[key]*chart.Series{}
	points := 0
	for rows.Next() {
		var ms, done int64
		var k key
		if err := rows.Scan(&ms, &k.side, &k.job, &done); err != nil {
			return "", fmt.Errorf("read the demo's progress: %w", err)
		}
		s := series[k]
		if s == nil {
			s = &chart.Series{Name: sideLabel(k.side)}
			series[k] = s
		}
		s.Hours = append(s.Hours, time.UnixMilli(ms).Sub(start).Hours())
		s.Values = append(s.Values, float64(done))
		points = max(points, len(s.Hours))
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read the demo's progress: %w", err)
	}
	if points < 2 {
		return "", nil
	}
	c := chart.Chart{Title: "Articles done per job, both sides", Hours: max(now.Sub(start).Hours(), chartStep.Hours()), Start: start.UTC()}
	for _, job := range jobNames {
		p := chart.Panel{Title: job, Unit: "articles done"}
		for _, side := range d.sides() {
			if s := series[key{side, job}]; s != nil {
				p.Series = append(p.Series, *s)
			}
		}
		c.Panels = append(c.Panels, p)
	}
	var b bytes.Buffer
	if err := chart.Write(&b, c); err != nil {
		return "", fmt.Errorf("draw the demo's chart: %w", err)
	}
	// Package chart escapes every label it writes.
	return template.HTML(b.String()), nil
}
