// temporal-server starts the Temporal server (go.temporal.io/server, the version
// the Temporal CLI embeds) from one YAML config file, with the PostgreSQL
// persistence plugin linked in. infra/temporal-pg.sh builds and runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	_ "go.temporal.io/server/common/persistence/sql/sqlplugin/postgresql" // the postgres12 plugin
	"go.temporal.io/server/temporal"
)

func main() {
	configFile := flag.String("config", "", "path of the server's YAML config file")
	flag.Parse()
	if err := run(*configFile); err != nil {
		fmt.Fprintf(os.Stderr, "temporal-server: %v\n", err)
		os.Exit(1)
	}
}

func run(configFile string) error {
	if configFile == "" || !strings.HasSuffix(configFile, ".yaml") {
		return fmt.Errorf("-config must name a .yaml file, got %q", configFile)
	}
	// The server's loader reads <dir>/<env>.yaml (after an optional base.yaml):
	// the file's name is the environment.
	env := strings.TrimSuffix(filepath.Base(configFile), ".yaml")
	cfg, err := config.LoadConfig(env, filepath.Dir(configFile), "")
	if err != nil {
		return err
	}
	logger := log.NewZapLogger(log.BuildZapLogger(cfg.Log))
	dynamicConfig := dynamicconfig.Client(dynamicconfig.NewNoopClient())
	if cfg.DynamicConfigClient != nil {
		dynamicConfig, err = dynamicconfig.NewFileBasedClient(cfg.DynamicConfigClient, logger, temporal.InterruptCh())
		if err != nil {
			return fmt.Errorf("dynamic config: %w", err)
		}
	}
	server, err := temporal.NewServer(
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithConfig(cfg),
		temporal.WithDynamicConfigClient(dynamicConfig),
		temporal.WithLogger(logger),
		temporal.InterruptOn(temporal.InterruptCh()),
	)
	if err != nil {
		return fmt.Errorf("creating the server: %w", err)
	}
	return server.Start()
}
