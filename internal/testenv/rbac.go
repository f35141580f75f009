package testenv

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

// RBACManifest is the agent's RBAC example, relative to the repository root.
// AgentKubeconfig applies exactly this file, so the tests prove it sufficient.
const RBACManifest = "examples/rbac/kolla-agent.yaml"

// agentTokenTTL is the lifetime of the agent's token: longer than any test.
const agentTokenTTL = time.Hour

// AgentUser is the user name the agent's ServiceAccount authenticates as, as
// it appears in the audit log.
func AgentUser(namespace string) string {
	return "system:serviceaccount:" + namespace + ":kolla-agent"
}

// AgentKubeconfig applies RBACManifest in namespace (ServiceAccount, Role and
// RoleBinding; extra rules are appended to the Role, e.g. for a custom
// resource), obtains a token for the ServiceAccount through the TokenRequest
// API and writes a kubeconfig that uses it. It returns once the permissions
// are in effect. Calling it again for the same namespace replaces the Role's
// rules and issues a new token.
func (e *Env) AgentKubeconfig(ctx context.Context, namespace string, extra ...rbacv1.PolicyRule) (string, error) {
	return e.AgentKubeconfigWith(ctx, namespace, nil, extra...)
}

// AgentKubeconfigWith is AgentKubeconfig that also applies more of the
// RBAC examples (paths relative to the repository root, each a Role and a
// RoleBinding for the same ServiceAccount), e.g. a bootstrap mode's.
func (e *Env) AgentKubeconfigWith(ctx context.Context, namespace string, manifests []string, extra ...rbacv1.PolicyRule) (string, error) {
	objs, err := readRBAC(RBACManifest, true)
	if err != nil {
		return "", err
	}
	objs.role.Rules = append(objs.role.Rules, extra...)
	if err := e.applyRBAC(ctx, namespace, objs); err != nil {
		return "", fmt.Errorf("testenv: apply %s in %s: %w", RBACManifest, namespace, err)
	}
	rules := objs.role.Rules
	var clusterRules []rbacv1.PolicyRule
	for _, m := range manifests {
		more, err := readRBAC(m, false)
		if err != nil {
			return "", err
		}
		more.sa = objs.sa
		if err := e.applyRBAC(ctx, namespace, more); err != nil {
			return "", fmt.Errorf("testenv: apply %s in %s: %w", m, namespace, err)
		}
		rules = append(rules, more.role.Rules...)
		if more.clusterRole != nil {
			clusterRules = append(clusterRules, more.clusterRole.Rules...)
		}
	}
	if err := e.waitAuthorizedIn(ctx, "", objs.sa.Name, namespace, clusterRules); err != nil {
		return "", fmt.Errorf("testenv: cluster rbac for %s: %w", AgentUser(namespace), err)
	}
	if err := e.waitAuthorized(ctx, namespace, objs.sa.Name, rules); err != nil {
		return "", fmt.Errorf("testenv: rbac for %s: %w", AgentUser(namespace), err)
	}
	ttl := int64(agentTokenTTL / time.Second)
	tr, err := e.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, objs.sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("testenv: token for %s/%s: %w", namespace, objs.sa.Name, err)
	}
	ca, err := servingCA(e.path(dirCerts), e.host)
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	if err := os.MkdirAll(e.path(dirAgents), 0o755); err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	path := filepath.Join(e.path(dirAgents), namespace+".kubeconfig")
	if err := writeKubeconfig(path, e.serverURL(), ca, objs.sa.Name, tr.Status.Token, namespace); err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	return path, nil
}

// LoadKubeconfig returns the client configuration of a kubeconfig written by
// this package (one cluster, token authentication): enough for tests, without
// clientcmd's dependencies.
func LoadKubeconfig(path string) (*rest.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc clientcmdv1.Config
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(kc.Clusters) != 1 || len(kc.AuthInfos) != 1 {
		return nil, fmt.Errorf("%s: want one cluster and one user", path)
	}
	c, a := kc.Clusters[0].Cluster, kc.AuthInfos[0].AuthInfo
	return &rest.Config{
		Host:        c.Server,
		BearerToken: a.Token,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.CertificateAuthorityData,
			Insecure: c.InsecureSkipTLSVerify,
		},
	}, nil
}

type rbacObjects struct {
	sa      *corev1.ServiceAccount
	role    *rbacv1.Role
	binding *rbacv1.RoleBinding
	// Optional, for cluster-scoped resources (nodes): applied with the
	// binding's subject in the test's namespace and a per-namespace name.
	clusterRole    *rbacv1.ClusterRole
	clusterBinding *rbacv1.ClusterRoleBinding
}

// readRBAC decodes an RBAC example (relative to the repository root)
// strictly, so a typo in a shipped example fails the tests instead of
// silently dropping a field. withSA: the file must hold the ServiceAccount.
func readRBAC(rel string, withSA bool) (rbacObjects, error) {
	var objs rbacObjects
	root, err := repoRoot()
	if err != nil {
		return objs, err
	}
	path := filepath.Join(root, rel)
	f, err := os.Open(path)
	if err != nil {
		return objs, fmt.Errorf("testenv: %w", err)
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return objs, fmt.Errorf("testenv: %s: %w", path, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return objs, fmt.Errorf("testenv: %s: document %d: %w", path, i, err)
		}
		var target any
		switch tm.Kind {
		case "ServiceAccount":
			objs.sa = &corev1.ServiceAccount{}
			target = objs.sa
		case "Role":
			objs.role = &rbacv1.Role{}
			target = objs.role
		case "RoleBinding":
			objs.binding = &rbacv1.RoleBinding{}
			target = objs.binding
		case "ClusterRole":
			objs.clusterRole = &rbacv1.ClusterRole{}
			target = objs.clusterRole
		case "ClusterRoleBinding":
			objs.clusterBinding = &rbacv1.ClusterRoleBinding{}
			target = objs.clusterBinding
		default:
			return objs, fmt.Errorf("testenv: %s: document %d: unexpected kind %q", path, i, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, target); err != nil {
			return objs, fmt.Errorf("testenv: %s: document %d (%s): %w", path, i, tm.Kind, err)
		}
	}
	if withSA && objs.sa == nil || objs.role == nil || objs.binding == nil {
		return objs, fmt.Errorf("testenv: %s: want a Role and a RoleBinding (and in %s a ServiceAccount)", path, RBACManifest)
	}
	return objs, nil
}

// applyRBAC creates the objects in namespace; for an existing Role it
// replaces the rules, so extra rules can change between calls.
func (e *Env) applyRBAC(ctx context.Context, namespace string, objs rbacObjects) error {
	objs.sa.Namespace, objs.role.Namespace, objs.binding.Namespace = namespace, namespace, namespace
	core, rbac := e.client.CoreV1(), e.client.RbacV1()
	if _, err := core.ServiceAccounts(namespace).Create(ctx, objs.sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := rbac.Roles(namespace).Create(ctx, objs.role, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		cur, err := rbac.Roles(namespace).Get(ctx, objs.role.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Rules = objs.role.Rules
		if _, err := rbac.Roles(namespace).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if _, err := rbac.RoleBindings(namespace).Create(ctx, objs.binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if objs.clusterRole == nil || objs.clusterBinding == nil {
		return nil
	}
	// Cluster-scoped: one per test namespace, so that tests do not share
	// (or delete) each other's grants.
	cr, crb := objs.clusterRole.DeepCopy(), objs.clusterBinding.DeepCopy()
	cr.Name += "-" + namespace
	crb.Name += "-" + namespace
	crb.RoleRef.Name = cr.Name
	for i := range crb.Subjects {
		crb.Subjects[i].Namespace = namespace
	}
	if _, err := rbac.ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// waitAuthorized waits until the API server's RBAC cache grants the
// ServiceAccount every rule, asking as the admin: a SelfSubjectAccessReview
// would show up among the agent's own requests in the audit log.
func (e *Env) waitAuthorized(ctx context.Context, namespace, sa string, rules []rbacv1.PolicyRule) error {
	return e.waitAuthorizedIn(ctx, namespace, sa, namespace, rules)
}

// waitAuthorizedIn checks the rules in namespace where ("" for cluster
// scope), for the ServiceAccount sa of namespace.
func (e *Env) waitAuthorizedIn(ctx context.Context, where, sa, namespace string, rules []rbacv1.PolicyRule) error {
	var checks []authorizationv1.ResourceAttributes
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					checks = append(checks, authorizationv1.ResourceAttributes{Namespace: where, Group: g, Resource: res, Verb: v})
				}
			}
		}
	}
	user := "system:serviceaccount:" + namespace + ":" + sa
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, attrs := range checks {
		var reason string
		err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			r, err := e.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &attrs},
			}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			reason = r.Status.Reason
			return r.Status.Allowed, nil
		})
		if err != nil {
			return fmt.Errorf("%s %s.%s not allowed (%s): %w", attrs.Verb, attrs.Resource, attrs.Group, reason, err)
		}
	}
	return nil
}

// repoRoot finds the module root above the working directory: tests run in
// their package's directory, hack/testenv in the root.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, RBACManifest)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("testenv: %s not found above the working directory", RBACManifest)
		}
		dir = parent
	}
}
