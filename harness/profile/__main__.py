from harness.profile.cli import main

raise SystemExit(main())
