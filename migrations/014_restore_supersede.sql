-- /memory restore (issue 20, row 6): a supersede undone by the person within a day is audited
-- as its own action, 'restore' (the pattern back to active, the supersedes relation removed).
ALTER TABLE pattern_audit DROP CONSTRAINT pattern_audit_action_check;
ALTER TABLE pattern_audit ADD CONSTRAINT pattern_audit_action_check
    CHECK (action IN ('forget', 'merge', 'supersede', 'dispute', 'pin', 'unpin', 'expire',
                      'restore'));
