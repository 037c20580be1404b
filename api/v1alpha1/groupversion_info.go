// Package v1alpha1 holds Rampart's public API: the rampart.io/v1alpha1 custom
// resources and the labels and annotations users put on their own objects.
//
// +kubebuilder:object:generate=true
// +groupName=rampart.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of Rampart's custom resources.
	GroupVersion = schema.GroupVersion{Group: "rampart.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
