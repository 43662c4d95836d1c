// chart-render: renders a Helm chart the way `helm template` does, without
// Helm (Debian packages no helm binary). Helm's engine is Go's text/template
// with the sprig function library plus a few functions of its own; this
// program supplies those (values.go: values and the schema; engine.go: the
// template set and the manifests it produces) and nothing the localdns chart
// does not need: no dependencies (subcharts), no lookup, no .Files, no hooks.
//
//	chart-render [flags] CHART_DIR > manifests.yaml
//
//	-f FILE                 values file merged over values.yaml (repeatable, in order)
//	--set PATH=VALUE[,...]  like helm's --set: typed scalars, {a,b} lists, \. in keys
//	--release-name NAME     .Release.Name (default "localdns")
//	--namespace NS          .Release.Namespace (default "default")
//	--release-service NAME  .Release.Service (default "Helm")
//	--kube-version V        .Capabilities.KubeVersion, checked against Chart.yaml kubeVersion
//	--api-versions G/V      added to .Capabilities.APIVersions (repeatable)
//	--notes FILE            write the rendered templates/NOTES.txt there
//
// The manifests go to stdout as one stream in Helm's install order, each
// document preceded by "# Source: <chart>/templates/<file>". Exit status 1
// with a message on stderr for values that fail values.schema.json, a
// template error (`required`, `fail`, a parse error) or a rendered document
// that is not a Kubernetes object.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// listFlag collects a repeatable flag's values in order.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var valueFiles, sets, apiVersions listFlag
	release := Release{Revision: 1, IsInstall: true}
	flag.Var(&valueFiles, "f", "values `file` merged over the chart's values.yaml (repeatable)")
	flag.Var(&sets, "set", "`path=value` override, as helm --set (repeatable)")
	flag.StringVar(&release.Name, "release-name", "localdns", "release `name`")
	flag.StringVar(&release.Namespace, "namespace", "default", "release `namespace`")
	flag.StringVar(&release.Service, "release-service", "Helm", ".Release.Service (the managed-by label)")
	kubeVersion := flag.String("kube-version", "v1.29.0", "Kubernetes `version` for .Capabilities")
	flag.Var(&apiVersions, "api-versions", "`group/version` added to .Capabilities.APIVersions (repeatable)")
	notesPath := flag.String("notes", "", "write the rendered NOTES.txt to `file`")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s [flags] CHART_DIR\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), valueFiles, sets, release, *kubeVersion, apiVersions, *notesPath); err != nil {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		os.Exit(1)
	}
}

func run(dir string, valueFiles, sets []string, release Release, kubeVersion string,
	apiVersions []string, notesPath string) error {
	chart, err := loadChart(dir)
	if err != nil {
		return err
	}
	caps, err := newCapabilities(kubeVersion, apiVersions)
	if err != nil {
		return err
	}
	if err := checkKubeVersion(chart.Metadata, caps); err != nil {
		return err
	}
	user, err := userValues(valueFiles, sets)
	if err != nil {
		return err
	}
	values := coalesce(chart.Values, user)
	if err := validateValues(chart, values); err != nil {
		return err
	}
	out, err := render(chart, values, release, caps)
	if err != nil {
		return err
	}
	manifests, err := splitManifests(out)
	if err != nil {
		return err
	}
	if notesPath != "" {
		if err := os.WriteFile(notesPath, []byte(out[notesName(chart)]), 0o644); err != nil {
			return err
		}
	}
	return writeStream(os.Stdout, manifests)
}
