// kube is the Kubernetes control plane, node agent and client in one binary,
// as hyperkube once was: kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet and kubectl, each the upstream command unchanged.
// It dispatches on its first argument (`kube kubelet --config ...`) or on the
// name it was started as (a symlink named kubectl). One binary links the
// shared Kubernetes packages once, so the build and the cache stay small.
// infra/k8s-cluster.sh builds it into .tools and runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // CronJob time zones, as the upstream apiserver and controller manager link it

	"github.com/spf13/cobra"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's auth plugins, as upstream links them
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// Each command is built only when chosen: their constructors register flags
// and defaults that should not meet in one process.
var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, known := commands[name]; !known && name != "kubectl" && len(os.Args) > 1 {
		name = os.Args[1]
		os.Args = append([]string{name}, os.Args[2:]...)
	}
	if name == "kubectl" {
		runKubectl()
		return
	}
	newCommand, known := commands[name]
	if !known {
		fmt.Fprintf(os.Stderr, "usage: kube <%s> [flags]\n", strings.Join(names(), "|"))
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}

// runKubectl is upstream's cmd/kubectl main: the log verbosity is read
// before the command is built, and errors are printed kubectl's way.
func runKubectl() {
	logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) // nolint:errcheck
	if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
}

func names() []string {
	all := []string{"kubectl"}
	for name := range commands {
		all = append(all, name)
	}
	sort.Strings(all)
	return all
}
