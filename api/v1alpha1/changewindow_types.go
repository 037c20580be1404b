package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationChangeOverride, set with a reason in the same request, lets a
// user the window names change guarded fields outside the window. Every
// override is recorded (Event, metric, the reason).
const AnnotationChangeOverride = "rampart.io/change-override"

// ChangeWindowSpec says which fields of which objects may change when.
//
// +kubebuilder:validation:XValidation:rule="!has(self.schedules) || self.schedules.all(s, has(s.days) != has(s.cron))",message="each schedule has either days (with start and end) or cron (with duration), not both"
type ChangeWindowSpec struct {
	// Resources are the kinds of object the window covers, in its namespace.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Resources []ResourceRule `json:"resources"`

	// Selector chooses the covered objects by label; absent: all of them.
	// +kubebuilder:validation:XValidation:rule="!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn'] && has(e.values) && size(e.values) > 0) || (e.operator in ['Exists', 'DoesNotExist'] && (!has(e.values) || size(e.values) == 0)))",message="each matchExpression needs operator In or NotIn with values, or Exists or DoesNotExist without values"
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`

	// Fields are the guarded paths, e.g.
	// spec.template.spec.containers[*].image; [*] stands for every item of
	// a list, [N] for one. Changes to other fields pass at any time.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_-]+(\[(\*|[0-9]+)\])?(\.[A-Za-z0-9_./-]+(\[(\*|[0-9]+)\])?)*$`
	// +listType=atomic
	Fields []string `json:"fields"`

	// Operations judged: UPDATE (the default) and, if listed, CREATE and
	// DELETE.
	// +kubebuilder:default={UPDATE}
	// +listType=set
	// +optional
	Operations []WindowOperation `json:"operations,omitempty"`

	// TimeZone is an IANA zone, e.g. Asia/Shanghai; schedules are in its
	// wall-clock time, daylight-saving changes included.
	// +kubebuilder:default=UTC
	// +kubebuilder:validation:XValidation:rule="timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0",message="unknown time zone: use an IANA name such as Europe/Berlin or UTC"
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// Schedules are the recurring windows when guarded fields may change.
	// With none, changes are allowed at any time outside the freezes. At
	// most 32: a denial's next opening costs a few cron steps per schedule
	// and freeze.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Schedules []Schedule `json:"schedules,omitempty"`

	// Freezes are dated periods when nothing guarded may change, even
	// inside a schedule (a holiday freeze).
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Freezes []Freeze `json:"freezes,omitempty"`

	// Override names who may change guarded fields outside the window, with
	// annotation rampart.io/change-override set to a reason.
	// +optional
	Override Subjects `json:"override,omitempty"`
}

// WindowOperation is an operation a window judges.
// +kubebuilder:validation:Enum=UPDATE;CREATE;DELETE
type WindowOperation string

// Schedule is a recurring window: on days from start to end (an end at or
// before the start runs past midnight), or from each cron activation for
// duration.
//
// +kubebuilder:validation:XValidation:rule="!has(self.days) || (has(self.start) && has(self.end))",message="a schedule with days needs start and end"
// +kubebuilder:validation:XValidation:rule="!has(self.cron) || has(self.duration)",message="a cron schedule needs a duration"
// +kubebuilder:validation:XValidation:rule="!has(self.duration) || (duration(self.duration) >= duration('1m') && duration(self.duration) <= duration('168h'))",message="duration must be between 1m and 168h: a cron fires at most once a minute"
type Schedule struct {
	// +kubebuilder:validation:MinItems=1
	// +listType=set
	// +optional
	Days []Weekday `json:"days,omitempty"`
	// Start and End are wall-clock times, HH:MM.
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	// +optional
	Start string `json:"start,omitempty"`
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	// +optional
	End string `json:"end,omitempty"`
	// Cron is a five-field schedule (minute hour day-of-month month
	// day-of-week) in the window's time zone: numbers, ranges, steps,
	// lists, * and names such as MON or JAN.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[0-9A-Za-z*/,?-]+( +[0-9A-Za-z*/,?-]+){4}$`
	// +optional
	Cron string `json:"cron,omitempty"`
	// Duration of each cron window, e.g. 2h.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Duration string `json:"duration,omitempty"`
}

// Weekday is a day of the week.
// +kubebuilder:validation:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
type Weekday string

// Freeze is a dated period when guarded fields may not change.
//
// +kubebuilder:validation:XValidation:rule="self.end > self.start",message="a freeze must end after it starts"
type Freeze struct {
	Start metav1.Time `json:"start"`
	End   metav1.Time `json:"end"`
	// Reason is shown in denials, e.g. "year-end freeze".
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Reason string `json:"reason,omitempty"`
}

// ChangeWindowStatus is what the manager observed of the window.
type ChangeWindowStatus struct {
	// Open says whether guarded fields may change now.
	Open bool `json:"open"`
	// NextOpen and NextClose are the next transitions, if any within 30 days.
	// kubectl get shows them as they are (RFC 3339, UTC): a column of type
	// date would show an age, which a future time does not have.
	// +optional
	NextOpen *metav1.Time `json:"nextOpen,omitempty"`
	// +optional
	NextClose *metav1.Time `json:"nextClose,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready is True once the window's webhook is registered.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ChangeWindow allows changes to guarded fields of matched objects only
// inside its schedules and outside its freezes.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cw,categories=rampart
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a window name is at most 63 characters: it becomes part of its webhook's name"
// +kubebuilder:printcolumn:name="Open",type=boolean,JSONPath=`.status.open`
// +kubebuilder:printcolumn:name="Next-Open",type=string,JSONPath=`.status.nextOpen`
// +kubebuilder:printcolumn:name="Next-Close",type=string,JSONPath=`.status.nextClose`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.timeZone`
type ChangeWindow struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ChangeWindowSpec   `json:"spec"`
	Status ChangeWindowStatus `json:"status,omitempty"`
}

// ChangeWindowList is a list of ChangeWindow.
//
// +kubebuilder:object:root=true
type ChangeWindowList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ChangeWindow `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ChangeWindow{}, &ChangeWindowList{})
}
