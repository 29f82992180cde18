// Command check builds lockgate's Kubernetes manifests offline and checks
// every object they hold:
//
//	go run . ../base ../overlays/redis
//
// Each argument is a kustomization directory, built with kustomize's Go
// API (sigs.k8s.io/kustomize/api/krusty, as `kubectl kustomize` does).
// Every object is then decoded strictly into its Go type: k8s.io/api's for
// the built-in kinds, the Prometheus Operator's for ServiceMonitor and
// PrometheusRule. A field the type does not have (a misspelling, a field
// at the wrong level, another case), a field given twice, or a kind this
// checker does not know fails the check, naming the object and the field.
// No cluster and no network are needed.
//
// It is a module of its own, like bench/, so that kustomize and k8s.io
// never become dependencies of the gateway.
package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: check KUSTOMIZATION-DIR...")
		os.Exit(2)
	}
	failed := false
	for _, dir := range os.Args[1:] {
		objs, err := Build(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "check: %s: %v\n", dir, err)
			failed = true
			continue
		}
		fmt.Printf("check: %s: %d objects, each decoded strictly\n", dir, len(objs))
	}
	if failed {
		os.Exit(1)
	}
}

// Object is one built object, decoded into its Go type.
type Object struct {
	// Kind and Name identify it ("Deployment", "lockgate").
	Kind, Name string
	// Value is a pointer to its Go type (*appsv1.Deployment, ...).
	Value any
}

// kinds maps each apiVersion and kind the manifests may hold to its Go
// type. Any other fails the check: add it here with its type.
var kinds = map[string]reflect.Type{
	"apps/v1/Deployment":                      reflect.TypeFor[appsv1.Deployment](),
	"apps/v1/StatefulSet":                     reflect.TypeFor[appsv1.StatefulSet](),
	"v1/Service":                              reflect.TypeFor[corev1.Service](),
	"v1/Secret":                               reflect.TypeFor[corev1.Secret](),
	"v1/ConfigMap":                            reflect.TypeFor[corev1.ConfigMap](),
	"policy/v1/PodDisruptionBudget":           reflect.TypeFor[policyv1.PodDisruptionBudget](),
	"networking.k8s.io/v1/NetworkPolicy":      reflect.TypeFor[networkingv1.NetworkPolicy](),
	"monitoring.coreos.com/v1/ServiceMonitor": reflect.TypeFor[monitoringv1.ServiceMonitor](),
	"monitoring.coreos.com/v1/PrometheusRule": reflect.TypeFor[monitoringv1.PrometheusRule](),
}

// Build builds the kustomization in dir of fsys and decodes every object
// strictly (see the package doc). Errors: kustomize's, or one per object
// that does not decode, joined.
func Build(fsys filesys.FileSystem, dir string) ([]Object, error) {
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build: %w", err)
	}
	var objs []Object
	var errs []error
	for _, r := range rm.Resources() {
		gvk := r.GetGvk()
		id := gvk.ApiVersion() + "/" + gvk.Kind
		name := gvk.Kind + " " + r.GetName()
		typ, ok := kinds[id]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: apiVersion %s kind %s is not one this checker knows", name, gvk.ApiVersion(), gvk.Kind))
			continue
		}
		data, err := r.MarshalJSON()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		v := reflect.New(typ).Interface()
		if err := Decode(data, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			continue
		}
		objs = append(objs, Object{Kind: gvk.Kind, Name: r.GetName(), Value: v})
	}
	return objs, errors.Join(errs...)
}

// Decode decodes JSON data into v as the API server's strict field
// validation does: field names are matched with their case, and an
// unknown or duplicated field is an error.
func Decode(data []byte, v any) error {
	strict, err := kjson.UnmarshalStrict(data, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}
