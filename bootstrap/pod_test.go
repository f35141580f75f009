package bootstrap

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The condition's message is what anyone who may read the pod sees: a
// password in a URL of the error is redacted, and a long message is cut
// to 1,024 bytes, as the agent's Events are.
func TestSetPodConditionRedactsAndCuts(t *testing.T) {
	ns, k := env.Namespace(t), leaseKube(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "keystone-0", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "keystone", Image: "none"}}}}
	if _, err := env.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Kube: k, Namespace: ns, Name: "keystone", PodName: "keystone-0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{
		"db_sync: (pymysql.err.OperationalError) mysql+pymysql://keystone:s3cret@mariadb/keystone refused",
		"db_sync: mysql+pymysql://keystone:s3cret@mariadb/keystone " + strings.Repeat("x", 2000),
	} {
		if err := c.SetPodCondition(ctx, "keystone-0", false, "BootstrapFailed", msg); err != nil {
			t.Fatal(err)
		}
		got, err := env.Client().CoreV1().Pods(ns).Get(ctx, "keystone-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var m string
		for _, cd := range got.Status.Conditions {
			if cd.Type == ConditionBootstrapped {
				m = cd.Message
			}
		}
		switch {
		case m == "" || strings.Contains(m, "s3cret"):
			t.Errorf("condition message %q: want it there, without the password", m)
		case len(msg) > 1024 && (len(m) != 1024 || !strings.HasSuffix(m, "...")):
			t.Errorf("a %d-byte message became %d bytes ending %q: want 1,024 ending ...", len(msg), len(m), m[len(m)-5:])
		case len(msg) <= 1024 && !strings.HasSuffix(m, " refused"):
			t.Errorf("a short message cut: %q", m)
		}
	}
}
