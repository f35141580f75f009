package discovery

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// The checks read a handful of fields of five API types. They decode them
// into these local structs, from the dynamic client's unstructured objects,
// rather than into k8s.io/api's types: those carry generated methods for
// every field of every type, and text/template (which calls methods by name
// through reflection) makes the linker keep all of them, megabytes the agent
// never calls. The JSON names are the API's.

type condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

type named struct {
	Name string `json:"name"`
}

type containerStatus struct {
	Name  string `json:"name"`
	Ready bool   `json:"ready"`
	State struct {
		Running *struct{} `json:"running,omitempty"`
		Waiting *struct {
			Reason string `json:"reason,omitempty"`
		} `json:"waiting,omitempty"`
		Terminated *struct {
			Reason   string `json:"reason,omitempty"`
			ExitCode int32  `json:"exitCode"`
		} `json:"terminated,omitempty"`
	} `json:"state"`
}

type nodeSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

type pod struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NodeName       string  `json:"nodeName,omitempty"`
		Containers     []named `json:"containers"`
		InitContainers []named `json:"initContainers,omitempty"`
		Affinity       *struct {
			NodeAffinity *struct {
				Required *struct {
					NodeSelectorTerms []struct {
						MatchFields []nodeSelectorRequirement `json:"matchFields,omitempty"`
					} `json:"nodeSelectorTerms"`
				} `json:"requiredDuringSchedulingIgnoredDuringExecution,omitempty"`
			} `json:"nodeAffinity,omitempty"`
		} `json:"affinity,omitempty"`
	} `json:"spec"`
	Status struct {
		Phase                 string            `json:"phase,omitempty"`
		Conditions            []condition       `json:"conditions,omitempty"`
		ContainerStatuses     []containerStatus `json:"containerStatuses,omitempty"`
		InitContainerStatuses []containerStatus `json:"initContainerStatuses,omitempty"`
	} `json:"status"`
}

type endpointSlice struct {
	metav1.ObjectMeta `json:"metadata"`
	Endpoints         []struct {
		Addresses  []string `json:"addresses"`
		Conditions struct {
			Ready *bool `json:"ready,omitempty"`
		} `json:"conditions"`
	} `json:"endpoints"`
}

type endpointAddress struct {
	IP string `json:"ip"`
}

type endpoints struct {
	metav1.ObjectMeta `json:"metadata"`
	Subsets           []struct {
		Addresses         []endpointAddress `json:"addresses,omitempty"`
		NotReadyAddresses []endpointAddress `json:"notReadyAddresses,omitempty"`
	} `json:"subsets,omitempty"`
}

type job struct {
	metav1.ObjectMeta `json:"metadata"`
	Status            struct {
		Conditions []condition `json:"conditions,omitempty"`
		Active     int32       `json:"active,omitempty"`
		Succeeded  int32       `json:"succeeded,omitempty"`
		Failed     int32       `json:"failed,omitempty"`
	} `json:"status"`
}

type daemonSet struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector *metav1.LabelSelector `json:"selector"`
	} `json:"spec"`
	Status struct {
		ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	} `json:"status"`
}

// decodeAll converts the informer's unstructured objects; one that does not
// decode (a field of an unexpected type) is left out rather than failing the
// whole set: the next event brings it again.
func decodeAll[T any](objs []any) []*T {
	out := make([]*T, 0, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var t T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t); err == nil {
			out = append(out, &t)
		}
	}
	return out
}
