"""The scenario: schema, units and quantities, loading with overrides, the generated reference."""
