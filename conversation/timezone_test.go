package conversation_test

// context.time_zone on a host without zoneinfo, as in a scratch or
// distroless image: the test runs itself again in a child whose
// /usr/share/zoneinfo is an empty tmpfs (a private mount namespace), with
// ZONEINFO and GOROOT naming an empty directory, so that time.LoadLocation
// knows no zone but UTC.

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/realtest"
	"github.com/poppyproto/poppy/poppytest"
)

const noZoneinfoEnv = "CONVERSATION_NO_ZONEINFO_CHILD"

// TestPA_7_4_06_TimeZoneWithoutZoneinfo: a valid IANA name is sent, and
// the fake Company (CO side of PA-7.4-06) takes it, where the host has no
// zoneinfo; an invalid one is still refused before sending.
func TestPA_7_4_06_TimeZoneWithoutZoneinfo(t *testing.T) {
	if os.Getenv(noZoneinfoEnv) == "1" {
		timeZoneChild(t)
		return
	}
	if testing.Short() {
		t.Skip("runs a child process")
	}
	empty := t.TempDir()
	args := []string{os.Args[0], "-test.run=^TestPA_7_4_06_TimeZoneWithoutZoneinfo$", "-test.count=1", "-test.v"}
	var cmd *exec.Cmd
	if _, err := os.Stat("/usr/share/zoneinfo"); err == nil {
		unshare, err := exec.LookPath("unshare")
		if err != nil || exec.Command(unshare, "-rm", "true").Run() != nil {
			realtest.Missing(t, "a private mount namespace (unshare -rm)", "hiding /usr/share/zoneinfo from a child needs unshare(1) and unprivileged user namespaces")
		}
		cmd = exec.Command(unshare, append([]string{"-rm", "sh", "-c", `mount -t tmpfs none /usr/share/zoneinfo && exec "$@"`, "sh"}, args...)...)
	} else {
		cmd = exec.Command(args[0], args[1:]...)
	}
	cmd.Env = append(os.Environ(), noZoneinfoEnv+"=1", "ZONEINFO="+empty, "GOROOT="+empty)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child without zoneinfo: %v\n%s", err, out)
	}
}

func timeZoneChild(t *testing.T) {
	if _, err := time.LoadLocation("America/Los_Angeles"); err == nil {
		t.Fatal("the child still has zoneinfo: the test shows nothing")
	}
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Message{Text: "Hello.", Context: &conversation.Context{TimeZone: "America/Los_Angeles"}}, nil)
	if _, err := c.Send(ctx, conversation.UpdateContext(conversation.Context{TimeZone: "Europe/Paris"}), nil); err != nil {
		t.Fatalf("PA-7.4-06: a valid time zone refused without zoneinfo: %v", err)
	}
	info, _ := e.Srv.Conversations().Get(c.ID())
	if info.Context["time_zone"] != "Europe/Paris" {
		t.Fatalf("the Company's context %v", info.Context)
	}
	if v := e.Srv.Violations(); len(v) != 0 {
		t.Fatalf("the fake Company saw violations: %+v", v)
	}
	if _, err := c.Send(ctx, conversation.UpdateContext(conversation.Context{TimeZone: "Mars/Olympus_Mons"}), nil); !errors.Is(err, conversation.ErrInvalidContext) {
		t.Fatalf("an unknown zone: err = %v", err)
	}
}
