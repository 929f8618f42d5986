-- Undoes nothing: 0003_index_names.sql gave indexes of 0001_holds.sql and
-- 0002_review.sql the names that fit, and made those that were missing; they go with
-- their tables when those migrations are undone.
SELECT 1;
