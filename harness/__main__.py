from harness.commands.main import main

raise SystemExit(main())
