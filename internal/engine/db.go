package engine

import (
	"context"

	"github.com/sluice-dev/sluice/internal/store"
	// The drivers store.Open may pick.
	_ "github.com/sluice-dev/sluice/internal/store/postgres"
	_ "github.com/sluice-dev/sluice/internal/store/sqlite"
)

// openDB opens the store named by dbURL (see store.Open) and the handle it
// shares with DBOS.
func openDB(ctx context.Context, dbURL string) (store.Store, store.Handle, error) {
	st, err := store.Open(ctx, dbURL)
	if err != nil {
		return nil, store.Handle{}, err
	}
	h, err := st.Handle()
	if err != nil {
		st.Close()
		return nil, store.Handle{}, err
	}
	return st, h, nil
}
