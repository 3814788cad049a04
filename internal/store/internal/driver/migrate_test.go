package driver

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []string // version_name in order
		wantErr string
	}{
		{
			name: "sorted by version",
			files: fstest.MapFS{
				"m/002_second.sql": {Data: []byte("B")},
				"m/001_first.sql":  {Data: []byte("A")},
				"m/README.md":      {Data: []byte("not a migration")},
			},
			want: []string{"1_first:A", "2_second:B"},
		},
		{
			name:    "gap",
			files:   fstest.MapFS{"m/001_a.sql": {}, "m/003_c.sql": {}},
			wantErr: "want version 2",
		},
		{
			name:    "repeat",
			files:   fstest.MapFS{"m/001_a.sql": {}, "m/01_b.sql": {}},
			wantErr: "want version 2",
		},
		{
			name:    "bad name",
			files:   fstest.MapFS{"m/001-a.sql": {}},
			wantErr: "001-a.sql: name must be",
		},
		{
			name:    "version zero",
			files:   fstest.MapFS{"m/000_a.sql": {}},
			wantErr: "positive",
		},
		{
			name:    "empty",
			files:   fstest.MapFS{"m/x.txt": {}},
			wantErr: "no migrations",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := load(tt.files, "m")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, f := range got {
				names = append(names, fmt.Sprintf("%d_%s:%s", f.Version, f.Name, f.SQL))
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("Load = %v, want %v", names, tt.want)
			}
		})
	}
}

func TestCheckApplied(t *testing.T) {
	t.Parallel()
	known := []File{{Version: 1}, {Version: 2}}
	if err := checkApplied(known, map[int]bool{1: true, 2: true}); err != nil {
		t.Fatalf("all known: %v", err)
	}
	err := checkApplied(known, map[int]bool{1: true, 2: true, 3: true})
	if err == nil || !strings.Contains(err.Error(), "migration 3") {
		t.Fatalf("newer schema: error = %v, want one naming migration 3", err)
	}
}
