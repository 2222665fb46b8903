package yamlconf

import (
	"errors"
	"testing"
)

func TestSuggest(t *testing.T) {
	keys := []string{"desired", "min_healthy", "max_age", "max_age_jitter", "boot"}
	for _, tc := range []struct{ word, want string }{
		{"desird", "desired"},
		{"min_healty", "min_healthy"},
		{"max_age_jiter", "max_age_jitter"},
		{"DESIRED", "desired"},
		{"colour", ""}, // nothing near: no guess
		{"bo", ""},     // as many edits as letters is no suggestion
	} {
		if got := Suggest(tc.word, keys); got != tc.want {
			t.Errorf("Suggest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
	if d := Distance("kitten", "sitting"); d != 3 {
		t.Errorf("Distance(kitten, sitting) = %d, want 3", d)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]string{
		"3 days":  `"3 days" is not a duration (use 72h)`,
		"1w":      `"1w" is not a duration (use 168h)`,
		"30":      `"30" is not a duration (use 30s, with its unit)`,
		"often":   `"often" is not a duration (use a number and a unit: 90s, 10m, 72h)`,
		"\x1b[2J": `"\x1b[2J" is not a duration (use a number and a unit: 90s, 10m, 72h)`,
	} {
		if _, err := ParseDuration(in); err == nil || err.Error() != want {
			t.Errorf("ParseDuration(%q) = %v, want %s", in, err, want)
		}
	}
	if d, err := ParseDuration("90s"); err != nil || d.Seconds() != 90 {
		t.Errorf("ParseDuration(90s) = %v, %v", d, err)
	}
}

// A validation error is placed at the line of the field it names, or of
// the nearest enclosing one the file holds.
func TestAnnotate(t *testing.T) {
	var v struct {
		Roles []struct {
			Name string `yaml:"name"`
			Boot struct {
				Image string `yaml:"image"`
			} `yaml:"boot"`
		} `yaml:"roles"`
	}
	doc, err := Decode("c.yaml", []byte("roles:\n  - name: a\n  - name: b\n    boot: {}\n"), &v)
	if err != nil {
		t.Fatal(err)
	}
	for msg, want := range map[string]string{
		"roles[1].name: bad":       "c.yaml:3: roles[1].name: bad",
		"roles[1].boot.image: req": "c.yaml:4: roles[1].boot.image: req",
		"interval: bad":            "c.yaml: interval: bad",
		"no path here":             "c.yaml: no path here",
	} {
		if got := doc.Annotate(errors.New(msg)); got.Error() != want {
			t.Errorf("Annotate(%q) = %q, want %q", msg, got, want)
		}
	}
}
