package xce

import (
	"fmt"
	"testing"
	"time"
)

// Job.State is a State with the protocol's names; times are time.Time, zero when not reached.
func TestStateAndTimes(t *testing.T) {
	for st, want := range map[State]string{JobPend: "PEND", JobRun: "RUN", JobSusp: "SUSP",
		JobDone: "DONE", JobExit: "EXIT", State(99): "UNKNOWN"} {
		if st.String() != want || fmt.Sprint(st) != want || JobStateName(st) != want {
			t.Errorf("%d: %q, want %q", int(st), st.String(), want)
		}
	}
	if !msTime(0).IsZero() {
		t.Error("0 ms is not the zero time")
	}
	if got := msTime(1_700_000_000_123); !got.Equal(time.Date(2023, 11, 14, 22, 13, 20, 123e6, time.UTC)) {
		t.Errorf("msTime: %v", got)
	}
	var j Job
	j.State = JobRun
	if fmt.Sprintf("%v", j.State) != "RUN" || !j.StartTime.IsZero() {
		t.Errorf("%v %v", j.State, j.StartTime)
	}
}
