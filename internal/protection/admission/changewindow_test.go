package admission_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/rampart-io/rampart/internal/operations/localcluster/clustertest"
)

var windows = schema.GroupVersionResource{Group: "rampart.io", Version: "v1alpha1", Resource: "changewindows"}

func applyWindow(t *testing.T, env *clustertest.Env, ns, manifest string) error {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatal(err)
	}
	_, err := env.Dynamic.Resource(windows).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	return err
}

// hhmm is a wall-clock time in UTC, h hours from now.
func hhmm(h time.Duration) string { return time.Now().UTC().Add(h).Format("15:04") }

func waitWindowReady(t *testing.T, env *clustertest.Env, ns, name string) *unstructured.Unstructured {
	t.Helper()
	var got *unstructured.Unstructured
	eventually(t, "window "+name+" Ready", func(ctx context.Context) (bool, error) {
		u, err := env.Dynamic.Resource(windows).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = u
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m := c.(map[string]any); m["type"] == "Ready" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

func TestChangeWindow(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	// Open every day for an hour, twelve hours from now: closed now.
	err := applyWindow(t, env, ns, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ChangeWindow
metadata: {name: off-peak}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  selector: {matchLabels: {tier: frontend}}
  fields: ["spec.template.spec.containers[*].image", "spec.template.spec.containers[*].env"]
  timeZone: UTC
  schedules: [{days: [Mon, Tue, Wed, Thu, Fri, Sat, Sun], start: "%s", end: "%s"}]
  override: {users: [oncall]}`, hhmm(12*time.Hour), hhmm(13*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	w := waitWindowReady(t, env, ns, "off-peak")
	if open, _, _ := unstructured.NestedBool(w.Object, "status", "open"); open {
		t.Error("status.open is true for a window that opens in 12 hours")
	}
	if next, _, _ := unstructured.NestedString(w.Object, "status", "nextOpen"); next == "" {
		t.Error("status.nextOpen is empty")
	}
	deploys := env.Client.AppsV1().Deployments(ns)
	if _, err := deploys.Create(ctx, newDeployment("web", 2, map[string]string{"tier": "frontend"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := deploys.Create(ctx, newDeployment("batch", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	imagePatch := func(name, image, override string) []byte {
		ann := ""
		if override != "" {
			ann = fmt.Sprintf(`"metadata":{"annotations":{"rampart.io/change-override":%q}},`, override)
		}
		return []byte(fmt.Sprintf(`{%s"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q}]}}}}`, ann, image))
	}
	t.Run("a guarded change outside the window is denied, naming the window, the field and the next opening", func(t *testing.T) {
		eventually(t, "the window's webhook to deny", func(ctx context.Context) (bool, error) {
			_, err := deploys.Patch(ctx, "web", types.StrategicMergePatchType, imagePatch("web", "registry.example/app:2", ""), metav1.PatchOptions{})
			return apierrors.IsForbidden(err), nil
		})
		_, err := deploys.Patch(ctx, "web", types.StrategicMergePatchType, imagePatch("web", "registry.example/app:2", ""), metav1.PatchOptions{})
		mustForbid(t, err, `ChangeWindow "off-peak" is closed`, "spec.template.spec.containers[0].image", "It next opens at", "rampart.io/change-override=<reason>")
		d, _ := deploys.Get(ctx, "web", metav1.GetOptions{})
		if img := d.Spec.Template.Spec.Containers[0].Image; img != "registry.example/app:1" {
			t.Fatalf("image = %s after a denied change", img)
		}
	})
	t.Run("unguarded fields change at any time", func(t *testing.T) {
		if _, err := deploys.Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"release":"x"}},"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("objects the selector does not choose are not guarded", func(t *testing.T) {
		if _, err := deploys.Patch(ctx, "batch", types.StrategicMergePatchType, imagePatch("batch", "registry.example/app:2", ""), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an override by a user the window does not name is refused", func(t *testing.T) {
		_, err := as(t, env, "intern").AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, imagePatch("web", "registry.example/app:2", "I think it is fine"), metav1.PatchOptions{})
		mustForbid(t, err, "override by intern is refused")
	})
	t.Run("an override by the named user passes and is recorded", func(t *testing.T) {
		before := metricValue(t, env, `rampart_changewindow_overrides_total{namespace="`+ns+`",window="off-peak"}`)
		if _, err := as(t, env, "oncall").AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, imagePatch("web", "registry.example/app:2", "CVE-2026-4242 hotfix"), metav1.PatchOptions{}); err != nil {
			t.Fatalf("override by oncall: %v", err)
		}
		eventually(t, "a ChangeOverride event with the reason", func(ctx context.Context) (bool, error) {
			list, err := env.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=web,reason=ChangeOverride"})
			return err == nil && len(list.Items) > 0 && strings.Contains(list.Items[0].Note, "CVE-2026-4242 hotfix") && strings.Contains(list.Items[0].Note, "oncall"), err
		})
		if after := metricValue(t, env, `rampart_changewindow_overrides_total{namespace="`+ns+`",window="off-peak"}`); after != before+1 {
			t.Errorf("overrides metric went from %v to %v, want +1", before, after)
		}
		// The reason left on the object does not open the window again.
		_, err := deploys.Patch(ctx, "web", types.StrategicMergePatchType, imagePatch("web", "registry.example/app:3", ""), metav1.PatchOptions{})
		mustForbid(t, err, `ChangeWindow "off-peak" is closed`)
	})
}

func TestChangeWindowOpenNowLetsChangesThrough(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	err := applyWindow(t, env, ns, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ChangeWindow
metadata: {name: now}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  fields: ["spec.template.spec.containers[*].image"]
  schedules: [{days: [Mon, Tue, Wed, Thu, Fri, Sat, Sun], start: "%s", end: "%s"}]`, hhmm(-time.Hour), hhmm(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	w := waitWindowReady(t, env, ns, "now")
	if open, _, _ := unstructured.NestedBool(w.Object, "status", "open"); !open {
		t.Fatal("status.open is false inside the window")
	}
	if _, err := env.Client.AppsV1().Deployments(ns).Create(ctx, newDeployment("web", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.example/app:2"}]}}}}`)
	if _, err := env.Client.AppsV1().Deployments(ns).Patch(ctx, "web", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("a change inside the window: %v", err)
	}
}

func TestMalformedWindowsAreRejected(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	head := `
apiVersion: rampart.io/v1alpha1
kind: ChangeWindow
metadata: {name: bad}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  fields: ["spec.replicas"]
`
	for _, tt := range []struct{ name, spec, want string }{
		{"unknown time zone", "  timeZone: Mars/Olympus_Mons\n", "unknown time zone"},
		{"a time that is not HH:MM", "  schedules: [{days: [Mon], start: \"25:00\", end: \"04:00\"}]\n", "spec.schedules[0].start"},
		{"days without an end", "  schedules: [{days: [Mon], start: \"02:00\"}]\n", "a schedule with days needs start and end"},
		{"both days and cron", "  schedules: [{days: [Mon], start: \"02:00\", end: \"03:00\", cron: \"0 2 * * *\", duration: 1h}]\n", "either days"},
		{"cron without duration", "  schedules: [{cron: \"0 2 * * *\"}]\n", "a cron schedule needs a duration"},
		{"a cron schedule that never fires", "  schedules: [{cron: \"0 0 30 2 *\", duration: 1h}]\n", "never fires"},
		{"a malformed cron", "  schedules: [{cron: \"0 99 * * *\", duration: 1h}]\n", "schedules[0].cron"},
		{"a freeze that ends before it starts", "  freezes: [{start: \"2026-12-31T00:00:00Z\", end: \"2026-12-24T00:00:00Z\"}]\n", "a freeze must end after it starts"},
		{"an unknown day", "  schedules: [{days: [Someday], start: \"02:00\", end: \"03:00\"}]\n", `Unsupported value: "Someday"`},
		{"more than 32 schedules", "  schedules: [" + strings.Repeat(`{cron: "0 2 * * *", duration: 1h}, `, 33) + "]\n", "spec.schedules: Too many: 33: must have at most 32 items"},
		{"a cron with a time zone or other syntax", "  schedules: [{cron: \"TZ=UTC 0 2 * * *\", duration: 1h}]\n", "spec.schedules[0].cron in body should match"},
		{"a cron too long", "  schedules: [{cron: \"" + strings.Repeat("1,", 70) + "1 * * * *\", duration: 1h}]\n", "spec.schedules[0].cron: Too long"},
		{"a cron window shorter than a minute", "  schedules: [{cron: \"* * * * *\", duration: 30s}]\n", "duration must be between 1m and 168h"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := applyWindow(t, env, ns, head+tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a rejection naming %q", err, tt.want)
			}
		})
	}
}

func as(t *testing.T, env *clustertest.Env, user string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters"}}
	return kubernetes.NewForConfigOrDie(cfg)
}

func metricValue(t *testing.T, env *clustertest.Env, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape(t, env), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

// Creation and deletion are outside a window's scope unless it lists them.
func TestChangeWindowJudgesCreateAndDeleteOnlyWhenListed(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	closed := fmt.Sprintf(`[{days: [Mon, Tue, Wed, Thu, Fri, Sat, Sun], start: "%s", end: "%s"}]`, hhmm(12*time.Hour), hhmm(13*time.Hour))
	err := applyWindow(t, env, ns, `
apiVersion: rampart.io/v1alpha1
kind: ChangeWindow
metadata: {name: creates}
spec:
  resources: [{apiGroups: [""], resources: [configmaps]}]
  selector: {matchLabels: {guarded: "yes"}}
  fields: ["data"]
  operations: [CREATE]
  schedules: `+closed)
	if err != nil {
		t.Fatal(err)
	}
	waitWindowReady(t, env, ns, "creates")
	cms := env.Client.CoreV1().ConfigMaps(ns)
	newCM := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"guarded": "yes"}}, Data: map[string]string{"k": "v"}}
	}
	eventually(t, "creation outside the window to be denied", func(ctx context.Context) (bool, error) {
		_, err := cms.Create(ctx, newCM("c1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), `ChangeWindow "creates"`), nil
	})
	// Not listed: updates and deletes pass.
	unguarded := newCM("c2")
	unguarded.Labels = nil
	if _, err := cms.Create(ctx, unguarded, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Patch(ctx, "c2", types.MergePatchType, []byte(`{"metadata":{"labels":{"guarded":"yes"}},"data":{"k":"w"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("an UPDATE passed through a window that lists only CREATE: %v", err)
	}
	if err := cms.Delete(ctx, "c2", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("a DELETE through a window that lists only CREATE: %v", err)
	}
}

// A window with as many every-minute schedules as the schema admits, frozen
// for weeks, made each denial enumerate 30 days of firings (2.6s of CPU
// apiece): a dozen concurrent denied updates timed out. Each must now come
// back as the window's own denial, which it can only do within the
// webhook's timeout (a timeout fails the request with another error).
func TestChangeWindowDenialsStayCheapWithDenseSchedules(t *testing.T) {
	env := clustertest.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	now := time.Now().UTC()
	err := applyWindow(t, env, ns, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ChangeWindow
metadata: {name: dense}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  fields: ["spec.template.spec.containers[*].image"]
  schedules: [%s]
  freezes: [{start: %q, end: %q, reason: "dense drill"}]`,
		strings.TrimSuffix(strings.Repeat(`{cron: "* * * * *", duration: 1m}, `, 32), ", "),
		now.Add(-time.Hour).Format(time.RFC3339), now.Add(29*24*time.Hour).Format(time.RFC3339)))
	if err != nil {
		t.Fatal(err)
	}
	waitWindowReady(t, env, ns, "dense")
	deploys := env.Client.AppsV1().Deployments(ns)
	const n = 12
	for i := range n {
		if _, err := deploys.Create(ctx, newDeployment(fmt.Sprintf("web-%d", i), 1, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"registry.example/app:2"}]}}}}`)
	eventually(t, "the window's webhook to deny", func(ctx context.Context) (bool, error) {
		_, err := deploys.Patch(ctx, "web-0", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return apierrors.IsForbidden(err), nil
	})
	errs := make([]error, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			_, errs[i] = deploys.Patch(ctx, fmt.Sprintf("web-%d", i), types.StrategicMergePatchType, patch, metav1.PatchOptions{})
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	t.Logf("%d concurrent denied updates answered in %v", n, took)
	for i, err := range errs {
		t.Run(fmt.Sprintf("web-%d", i), func(t *testing.T) {
			mustForbid(t, err, `ChangeWindow "dense" is frozen until`, "dense drill", "It next opens at")
		})
	}
}

// `kubectl get changewindows` shows when a window next closes and opens:
// the API server renders the table from the CRD's printer columns, and a
// future time must read as a time, not as `<invalid>`.
func TestKubectlGetChangeWindowsShowsTheNextTransitions(t *testing.T) {
	env := clustertest.Get(t)
	ns := env.Namespace(t)
	start := time.Now().UTC().Add(3 * time.Hour).Truncate(time.Second)
	end := start.Add(2 * time.Hour)
	err := applyWindow(t, env, ns, fmt.Sprintf(`
apiVersion: rampart.io/v1alpha1
kind: ChangeWindow
metadata: {name: freeze-soon}
spec:
  resources: [{apiGroups: [apps], resources: [deployments]}]
  fields: ["spec.template.spec.containers[*].image"]
  freezes: [{start: %q, end: %q, reason: release}]`, start.Format(time.RFC3339), end.Format(time.RFC3339)))
	if err != nil {
		t.Fatal(err)
	}
	waitWindowReady(t, env, ns, "freeze-soon")
	out, err := env.Kubectl(t, "get", "changewindows", "-n", ns)
	if err != nil {
		t.Fatalf("kubectl get changewindows: %v\n%s", err, out)
	}
	t.Logf("kubectl get changewindows:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and one row:\n%s", out)
	}
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	want := map[string]string{"NAME": "freeze-soon", "OPEN": "true", "NEXT-CLOSE": start.Format(time.RFC3339), "NEXT-OPEN": end.Format(time.RFC3339), "ZONE": "UTC"}
	if len(header) != len(row) {
		t.Fatalf("header and row differ in columns:\n%s", out)
	}
	for i, col := range header {
		if w, ok := want[col]; ok && row[i] != w {
			t.Errorf("column %s is %q, want %q", col, row[i], w)
		}
		delete(want, col)
	}
	if len(want) > 0 {
		t.Errorf("columns missing from the table: %v\n%s", want, out)
	}
}
