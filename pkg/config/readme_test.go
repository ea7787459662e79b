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

// TestREADMEReference checks the README's configuration table (its
// Reference section) against the type: every field is listed, every row is
// a field, and every default shown is the real one, lists and maps
// included.
func TestREADMEReference(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, reference, found := strings.Cut(string(readme), "\n### Reference\n")
	if !found {
		t.Fatal("README.md has no ### Reference section")
	}
	if i := strings.Index(reference, "\n#"); i >= 0 {
		reference = reference[:i]
	}
	rows := map[string]string{} // field path -> default cell
	for _, line := range strings.Split(reference, "\n") {
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
		want, ok := scalarDefault(value)
		if !ok {
			want, ok = listDefault(value)
		}
		if !ok {
			t.Errorf("`%s`: no way to compare its default %v with the README's", path, value)
			continue
		}
		if !sameDefault(strings.Trim(cell, "`"), want) {
			t.Errorf("README.md shows default %s for `%s`; the real default is %q", cell, path, want)
		}
	}
	for path := range rows {
		if _, ok := leaves[path]; !ok {
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

// listDefault returns a list or an empty map as the README shows it: "[]"
// or "{}" when empty, else its items separated by commas, a group and
// resource pair as "resource" (core group) or "group/resource".
func listDefault(v any) (string, bool) {
	switch v := v.(type) {
	case map[string]any:
		return "{}", len(v) == 0
	case []any:
		if len(v) == 0 {
			return "[]", true
		}
		items := make([]string, 0, len(v))
		for _, item := range v {
			switch item := item.(type) {
			case string:
				items = append(items, item)
			case map[string]any:
				group, _ := item["group"].(string)
				resource, _ := item["resource"].(string)
				if len(item) != 2 || resource == "" {
					return "", false
				}
				items = append(items, strings.TrimPrefix(group+"/"+resource, "/"))
			default:
				return "", false
			}
		}
		return strings.Join(items, ", "), true
	}
	return "", false
}

func sameDefault(cell, want string) bool {
	if cell == want {
		return true
	}
	a, errA := time.ParseDuration(cell)
	b, errB := time.ParseDuration(want)
	return errA == nil && errB == nil && a == b
}
