package main

// The chart on disk and its values: Chart.yaml, values.yaml, the user's -f
// files and --set pairs merged as Helm merges them, and the check against
// values.schema.json (JSON Schema draft-07 through gojsonschema, the library
// Helm 3 uses for the same check).

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/Masterminds/semver"
	"github.com/xeipuuv/gojsonschema"
	"sigs.k8s.io/yaml"
)

// Metadata is Chart.yaml; its Go field names are what templates see as .Chart.X.
type Metadata struct {
	APIVersion  string            `json:"apiVersion"`
	Name        string            `json:"name"`
	Version     string            `json:"version"`
	AppVersion  string            `json:"appVersion,omitempty"`
	Description string            `json:"description,omitempty"`
	Type        string            `json:"type,omitempty"`
	KubeVersion string            `json:"kubeVersion,omitempty"`
	Home        string            `json:"home,omitempty"`
	Sources     []string          `json:"sources,omitempty"`
	Keywords    []string          `json:"keywords,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Chart is a chart directory read into memory.
type Chart struct {
	Metadata  *Metadata
	Values    map[string]interface{}
	Schema    []byte            // values.schema.json, nil when absent
	Templates map[string]string // "<chart>/templates/<path>" -> text
	Files     Files             // every other file: .Files in templates
}

// Files is Helm's .Files: the chart's files outside templates/ (and but for
// Chart.yaml and the values files), by path relative to the chart.
type Files map[string][]byte

// Get is .Files.Get: the file's text, "" when there is no such file.
func (f Files) Get(name string) string { return string(f[name]) }

// GetBytes is .Files.GetBytes.
func (f Files) GetBytes(name string) []byte { return f[name] }

func loadChart(dir string) (*Chart, error) {
	c := &Chart{Metadata: &Metadata{}, Templates: map[string]string{}, Files: Files{}}
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	// Strict: a misspelt Chart.yaml field is an error, not a silent default.
	if err := yaml.UnmarshalStrict(raw, c.Metadata); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %v", err)
	}
	if c.Metadata.APIVersion != "v2" || c.Metadata.Name == "" || c.Metadata.Version == "" {
		return nil, fmt.Errorf("Chart.yaml: apiVersion v2, name and version are required")
	}
	if _, err := semver.StrictNewVersion(c.Metadata.Version); err != nil {
		return nil, fmt.Errorf("Chart.yaml: version %q is not SemVer 2: %v", c.Metadata.Version, err)
	}
	if c.Values, err = readValuesFile(filepath.Join(dir, "values.yaml")); err != nil {
		return nil, err
	}
	c.Schema, err = os.ReadFile(filepath.Join(dir, "values.schema.json"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	err = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		switch {
		case strings.HasPrefix(rel, "templates/"):
			c.Templates[c.Metadata.Name+"/"+rel] = string(text)
		case rel != "Chart.yaml" && rel != "values.yaml" && rel != "values.schema.json":
			c.Files[rel] = text
		}
		return nil
	})
	return c, err
}

func readValuesFile(path string) (map[string]interface{}, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	vals := map[string]interface{}{}
	if err := yaml.Unmarshal(raw, &vals); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return vals, nil
}

// userValues merges the -f files, then the --set pairs, later ones winning.
// Nulls are kept: coalesce uses them to delete a chart default.
func userValues(files, sets []string) (map[string]interface{}, error) {
	user := map[string]interface{}{}
	for _, f := range files {
		vals, err := readValuesFile(f)
		if err != nil {
			return nil, err
		}
		user = mergeMaps(user, vals)
	}
	for _, s := range sets {
		if err := applySet(user, s); err != nil {
			return nil, fmt.Errorf("--set %s: %v", s, err)
		}
	}
	return user, nil
}

// mergeMaps returns a with b laid over it: maps merge key by key, anything
// else in b replaces what a had.
func mergeMaps(a, b map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]interface{}); ok {
			if am, ok := out[k].(map[string]interface{}); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// coalesce lays the user's values over the chart's defaults as Helm does:
// tables merge, a user null removes the default, anything else replaces it.
func coalesce(defaults, user map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(defaults))
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range user {
		if v == nil {
			delete(out, k)
			continue
		}
		um, uok := v.(map[string]interface{})
		dm, dok := out[k].(map[string]interface{})
		if uok && dok {
			out[k] = coalesce(dm, um)
		} else {
			out[k] = v
		}
	}
	return out
}

// applySet applies one --set argument: comma-separated path=value pairs.
func applySet(vals map[string]interface{}, arg string) error {
	for _, pair := range splitUnescaped(arg, ',', true) {
		eq := strings.IndexByte(pair, '=')
		if eq <= 0 {
			return fmt.Errorf("%q is not path=value", pair)
		}
		path, raw := pair[:eq], pair[eq+1:]
		if strings.ContainsAny(path, "[]") {
			return fmt.Errorf("list indexes in paths are not supported; use -f")
		}
		keys := splitUnescaped(path, '.', false)
		var value interface{}
		if strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") {
			list := []interface{}{}
			if inner := raw[1 : len(raw)-1]; inner != "" {
				for _, item := range splitUnescaped(inner, ',', false) {
					list = append(list, typedValue(unescape(item)))
				}
			}
			value = list
		} else {
			value = typedValue(unescape(raw))
		}
		setPath(vals, keys, value)
	}
	return nil
}

// splitUnescaped splits s at sep where sep is not preceded by a backslash
// (and, with braces, not inside {...}). The backslashes stay for unescape.
func splitUnescaped(s string, sep byte, braces bool) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\':
			i++
		case braces && s[i] == '{':
			depth++
		case braces && s[i] == '}' && depth > 0:
			depth--
		case s[i] == sep && depth == 0:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	return append(parts, s[start:])
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

var decimalInt = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// typedValue reads a --set scalar as helm does: true, false, null, a
// decimal integer without leading zeros, else a string.
func typedValue(s string) interface{} {
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if decimalInt.MatchString(s) {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	}
	return s
}

func setPath(vals map[string]interface{}, keys []string, value interface{}) {
	for _, k := range keys[:len(keys)-1] {
		k = unescape(k)
		next, ok := vals[k].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			vals[k] = next
		}
		vals = next
	}
	vals[unescape(keys[len(keys)-1])] = value
}

// validateValues checks the coalesced values against values.schema.json.
func validateValues(c *Chart, values map[string]interface{}) error {
	if c.Schema == nil {
		return nil
	}
	doc, err := json.Marshal(values)
	if err != nil {
		return err
	}
	result, err := gojsonschema.Validate(gojsonschema.NewBytesLoader(c.Schema),
		gojsonschema.NewBytesLoader(doc))
	if err != nil {
		return fmt.Errorf("values.schema.json: %v", err)
	}
	if result.Valid() {
		return nil
	}
	var lines []string
	for _, e := range result.Errors() {
		lines = append(lines, "- "+e.String())
	}
	sort.Strings(lines)
	return fmt.Errorf("values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n%s",
		c.Metadata.Name, strings.Join(lines, "\n"))
}

// checkKubeVersion refuses a Kubernetes version outside Chart.yaml's kubeVersion.
func checkKubeVersion(m *Metadata, caps *Capabilities) error {
	if m.KubeVersion == "" {
		return nil
	}
	constraint, err := semver.NewConstraint(m.KubeVersion)
	if err != nil {
		return fmt.Errorf("Chart.yaml: kubeVersion %q: %v", m.KubeVersion, err)
	}
	v, err := semver.NewVersion(caps.KubeVersion.Version)
	if err != nil {
		return err
	}
	if !constraint.Check(v) {
		return fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s",
			m.KubeVersion, caps.KubeVersion.Version)
	}
	return nil
}
