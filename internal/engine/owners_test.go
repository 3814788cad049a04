package engine

import (
	"context"
	"strconv"
	"sync"
	"testing"
)

// The runs that begin while a read of owners is under way are read
// together in the next one, and each gets its own owner, or none.
func TestOwnerReadsGoTogether(t *testing.T) {
	t.Parallel()
	began, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	o := &ownerReads{read: func(_ context.Context, ids []string) (map[string]string, error) {
		mu.Lock()
		sizes = append(sizes, len(ids))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			close(began)
			<-release
		}
		owners := map[string]string{}
		for _, id := range ids {
			if id != "none" {
				owners[id] = "owner-of-" + id
			}
		}
		return owners, nil
	}}
	check := func(id string) {
		owner, err := o.get(id)
		switch {
		case err != nil:
			t.Errorf("owner of %s: %v", id, err)
		case id == "none" && owner != nil:
			t.Errorf("run %s has no owner, got %q", id, *owner)
		case id != "none" && (owner == nil || *owner != "owner-of-"+id):
			t.Errorf("owner of %s: got %v, want owner-of-%s", id, owner, id)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { check("first") })
	<-began
	ids := []string{"none"}
	for i := range 49 {
		ids = append(ids, "run-"+strconv.Itoa(i))
	}
	for _, id := range ids {
		wg.Go(func() { check(id) })
	}
	waitUntil(t, "every run waits for the read under way", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return len(o.waiting) == len(ids)
	})
	close(release)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != len(ids) {
		t.Fatalf("reads of %v runs, want one of 1 and then one of %d", sizes, len(ids))
	}
}
