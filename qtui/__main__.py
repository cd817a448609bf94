from qtui.cli import main

raise SystemExit(main())
