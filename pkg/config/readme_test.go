package config

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestREADMEReference checks the README's configuration table against the
// type: every field is listed, and every scalar default shown is the real one.
func TestREADMEReference(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // field path -> default cell
	for _, line := range strings.Split(string(readme), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		rows[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(cells[2])
	}

	data, err := json.Marshal(Defaulted())
	if err != nil {
		t.Fatal(err)
	}
	var tree map[string]any
	if err := json.Unmarshal(data, &tree); err != nil {
		t.Fatal(err)
	}
	leaves := map[string]any{}
	flatten("", tree, leaves)
	for path, value := range leaves {
		cell, ok := rows[path]
		if !ok {
			t.Errorf("README.md configuration reference has no row for `%s`", path)
			continue
		}
		if want, scalar := scalarDefault(value); scalar && !sameDefault(strings.Trim(cell, "`"), want) {
			t.Errorf("README.md shows default %s for `%s`; the real default is %q", cell, path, want)
		}
	}
	for path := range rows {
		if _, ok := leaves[path]; !ok && strings.Contains(path, ".") {
			t.Errorf("README.md lists `%s`, which is not a field of NodeGCConfiguration", path)
		}
	}
}

// flatten maps every leaf of v to its path; an empty map (a default of
// none, as imageGC.evictionSoft's) is a leaf.
func flatten(prefix string, v any, out map[string]any) {
	if obj, ok := v.(map[string]any); ok && len(obj) > 0 {
		for k, child := range obj {
			flatten(joinPath(prefix, k), child, out)
		}
		return
	}
	out[prefix] = v
}

func scalarDefault(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		if v == "" {
			return `""`, true
		}
		return v, true
	case float64, bool:
		return fmt.Sprint(v), true
	default:
		return "", false
	}
}

func sameDefault(cell, want string) bool {
	if cell == want {
		return true
	}
	a, errA := time.ParseDuration(cell)
	b, errB := time.ParseDuration(want)
	return errA == nil && errB == nil && a == b
}
