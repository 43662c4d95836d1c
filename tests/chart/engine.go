package main

// The template engine: one text/template set holding every file of the
// chart (so a define in _helpers.tpl is visible everywhere), sprig's
// functions without env/expandenv (as in Helm, a chart must not read the
// renderer's environment), and Helm's own: include, tpl, required, toYaml,
// fromYaml, toJson, fromJson. Then the rendered files are cut into
// documents and put in Helm's install order.

import (
	"encoding/json"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/semver"
	"github.com/Masterminds/sprig"
	"sigs.k8s.io/yaml"
)

// Release is .Release.
type Release struct {
	Name      string
	Namespace string
	Service   string
	Revision  int
	IsInstall bool
	IsUpgrade bool
}

// KubeVersion is .Capabilities.KubeVersion.
type KubeVersion struct {
	Version string // v1.29.0
	Major   string
	Minor   string
}

// APIVersions is .Capabilities.APIVersions; templates ask .Has "group/version".
type APIVersions []string

// Has says whether the cluster serves group/version (or group/version/Kind).
func (a APIVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

// Capabilities is .Capabilities: what `helm template` assumes of a cluster
// it cannot see.
type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions APIVersions
}

// The group/versions every supported cluster serves and the chart may ask about.
var builtinAPIVersions = []string{"v1", "apps/v1", "rbac.authorization.k8s.io/v1",
	"discovery.k8s.io/v1", "policy/v1"}

func newCapabilities(version string, extra []string) (*Capabilities, error) {
	v, err := semver.NewVersion(version)
	if err != nil {
		return nil, fmt.Errorf("--kube-version %q: %v", version, err)
	}
	return &Capabilities{
		KubeVersion: KubeVersion{
			Version: "v" + v.String(),
			Major:   fmt.Sprint(v.Major()),
			Minor:   fmt.Sprint(v.Minor()),
		},
		APIVersions: append(append(APIVersions{}, builtinAPIVersions...), extra...),
	}, nil
}

// includeDepthMax stops a template that includes itself without end.
const includeDepthMax = 1000

func notesName(c *Chart) string { return c.Metadata.Name + "/templates/NOTES.txt" }

// render executes every template that is not a partial (_*.tpl and the like)
// and returns name -> output, NOTES.txt included.
func render(c *Chart, values map[string]interface{}, rel Release, caps *Capabilities) (map[string]string, error) {
	t := template.New("chart").Option("missingkey=zero")
	depth := 0
	funcs := template.FuncMap{}
	for k, v := range sprig.TxtFuncMap() {
		funcs[k] = v
	}
	delete(funcs, "env")
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYaml
	funcs["fromYaml"] = fromYaml
	funcs["toJson"] = toJson
	funcs["fromJson"] = fromJson
	funcs["required"] = required
	funcs["include"] = func(name string, data interface{}) (string, error) {
		if depth >= includeDepthMax {
			return "", fmt.Errorf("include %q: nested more than %d deep", name, includeDepthMax)
		}
		depth++
		defer func() { depth-- }()
		var b strings.Builder
		err := t.ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		// A copy of the set, so the string can call the chart's defines
		// without adding a template to the set being executed.
		clone, err := t.Clone()
		if err != nil {
			return "", err
		}
		nt, err := clone.New("tpl").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl %q: %v", text, err)
		}
		var b strings.Builder
		if err := nt.Execute(&b, data); err != nil {
			return "", fmt.Errorf("tpl %q: %v", text, err)
		}
		return strings.ReplaceAll(b.String(), "<no value>", ""), nil
	}
	t.Funcs(funcs)

	names := make([]string, 0, len(c.Templates))
	for name := range c.Templates {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if _, err := t.New(name).Parse(c.Templates[name]); err != nil {
			return nil, fmt.Errorf("parse error: %v", err)
		}
	}

	out := map[string]string{}
	for _, name := range names {
		if strings.HasPrefix(path.Base(name), "_") {
			continue
		}
		data := map[string]interface{}{
			"Values":       values,
			"Release":      rel,
			"Chart":        c.Metadata,
			"Capabilities": caps,
			"Files":        c.Files,
			"Template": map[string]interface{}{
				"Name":     name,
				"BasePath": c.Metadata.Name + "/templates",
			},
		}
		var b strings.Builder
		if err := t.ExecuteTemplate(&b, name, data); err != nil {
			return nil, execError(err)
		}
		// missingkey=zero still prints "<no value>" for a missing key of a
		// map[string]interface{}; Helm removes it, so do we.
		out[name] = strings.ReplaceAll(b.String(), "<no value>", "")
	}
	return out, nil
}

var (
	templateLocation = regexp.MustCompile(`^template: ([^:]+:[0-9]+:[0-9]+):`)
	calledFunction   = regexp.MustCompile(`error calling \w+: `)
)

// execError shortens text/template's chain of "error calling include: ..."
// to where the outermost template failed and the innermost message (a
// `required` or `fail` text), as Helm prints them.
func execError(err error) error {
	msg := err.Error()
	where := templateLocation.FindStringSubmatch(msg)
	calls := calledFunction.FindAllStringIndex(msg, -1)
	if where == nil || calls == nil {
		return fmt.Errorf("execution error: %v", err)
	}
	return fmt.Errorf("execution error at (%s): %s", where[1], msg[calls[len(calls)-1][1]:])
}

// required fails the render with msg when v is nil or "".
func required(msg string, v interface{}) (interface{}, error) {
	if v == nil {
		return nil, fmt.Errorf("%s", msg)
	}
	if s, ok := v.(string); ok && s == "" {
		return nil, fmt.Errorf("%s", msg)
	}
	return v, nil
}

// toYaml marshals through JSON (sigs.k8s.io/yaml, as Helm): keys sorted, no
// trailing newline; an unmarshalable value gives "".
func toYaml(v interface{}) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// fromYaml reads a YAML mapping; a parse error is returned in m["Error"]
// rather than failing the template, as in Helm.
func fromYaml(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func toJson(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func fromJson(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

// Manifest is one rendered Kubernetes object.
type Manifest struct {
	Source string // the template it came from
	Kind   string
	Name   string
	Text   string
}

// installOrder is Helm's order for applying kinds; other kinds come after,
// by kind name.
var installOrder = []string{"Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange",
	"PodSecurityPolicy", "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList",
	"ConfigMap", "StorageClass", "PersistentVolume", "PersistentVolumeClaim",
	"CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
	"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service",
	"DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
	"APIService"}

// A line "---" (spaces after it allowed) starts a new YAML document.
var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitManifests cuts each rendered file (NOTES.txt aside) into documents,
// drops the empty ones, checks each is a Kubernetes object and sorts them.
func splitManifests(rendered map[string]string) ([]Manifest, error) {
	var all []Manifest
	for source, text := range rendered {
		if path.Base(source) == "NOTES.txt" {
			continue
		}
		for _, doc := range documentSeparator.Split(text, -1) {
			doc = strings.TrimSpace(doc)
			if isBlank(doc) {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				return nil, fmt.Errorf("YAML parse error on %s: %v", source, err)
			}
			if head.APIVersion == "" || head.Kind == "" || head.Metadata.Name == "" {
				return nil, fmt.Errorf("%s: a document without apiVersion, kind or metadata.name:\n%s",
					source, doc)
			}
			all = append(all, Manifest{Source: source, Kind: head.Kind, Name: head.Metadata.Name, Text: doc})
		}
	}
	rank := map[string]int{}
	for i, k := range installOrder {
		rank[k] = i
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		ra, aKnown := rank[a.Kind]
		rb, bKnown := rank[b.Kind]
		switch {
		case aKnown != bKnown:
			return aKnown
		case a.Kind != b.Kind && aKnown:
			return ra < rb
		case a.Kind != b.Kind:
			return a.Kind < b.Kind
		case a.Source != b.Source:
			return a.Source < b.Source
		}
		return a.Name < b.Name
	})
	return all, nil
}

// isBlank: nothing but whitespace and comment lines.
func isBlank(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

func writeStream(w io.Writer, manifests []Manifest) error {
	for _, m := range manifests {
		if _, err := fmt.Fprintf(w, "---\n# Source: %s\n%s\n", m.Source, m.Text); err != nil {
			return err
		}
	}
	return nil
}
