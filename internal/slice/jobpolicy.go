package slice

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// JobPolicy reads examples/rbac/job-policy.yaml as an operator applies it:
// the ValidatingAdmissionPolicy, its binding and the parameter ConfigMap.
func JobPolicy(repo string) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding, *corev1.ConfigMap, error) {
	b, err := os.ReadFile(filepath.Join(repo, "examples/rbac/job-policy.yaml"))
	if err != nil {
		return nil, nil, nil, err
	}
	docs := bytes.Split(b, []byte("\n---\n"))
	if len(docs) != 3 {
		return nil, nil, nil, fmt.Errorf("job-policy.yaml has %d documents, want the policy, its binding and the parameters", len(docs))
	}
	var policy admissionv1.ValidatingAdmissionPolicy
	var binding admissionv1.ValidatingAdmissionPolicyBinding
	var params corev1.ConfigMap
	for i, into := range []any{&policy, &binding, &params} {
		if err := yaml.UnmarshalStrict(docs[i], into); err != nil {
			return nil, nil, nil, fmt.Errorf("job-policy.yaml, document %d: %w", i+1, err)
		}
	}
	return &policy, &binding, &params, nil
}
